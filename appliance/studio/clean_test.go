package studio

import "testing"

// TestInertText: only texts that provably keep no session state may skip DISCARD ALL; every doubt says no.
func TestInertText(t *testing.T) {
	inert := []string{
		"select 1",
		"SELECT 1;",
		"  select 1 -- a comment\n",
		"/* a /* nested */ comment */ select 1",
		"select g, md5(g::text) from generate_series(1,1000) g",
		"select count(*) from generate_series(1, 10) as t(x) where x % 2 = 0",
		"select x, n from unnest(array['a','b']) with ordinality as u(x, n) order by n desc limit 1",
		"values (1, 'a'), (2, 'b')",
		"explain select 1",
		"explain verbose select now()",
		"select 'it''s', E'\\'', 1.5e-3, .5, 0.1::double precision, '12.50'::numeric(10,2)",
		"select date '2024-01-01', interval '1 day', '{}'::int[]",
		"select case when 1 = 1 then 'y' else 'n' end, coalesce(null, 2), 'ab' like 'a%'",
		"select exists (select 1), 1 in (1, 2), (select max(g) from generate_series(1, 3) g)",
		"select g.* from generate_series(1, 2) g",
		"select jsonb_build_object('a', 1) -> 'a', '{\"a\":1}'::jsonb ? 'a'",
		"select * from generate_series(1, 3)",
		"select * from generate_series(1, 3) where true",
		"select * from generate_series(1, 3) g",
		"select row_number() over (order by g) from generate_series(1,3) g",
	}
	for _, q := range inert {
		if !inertText(q) {
			t.Errorf("not inert, want inert: %s", q)
		}
	}
	notInert := []string{
		"",
		"   ",
		"-- only a comment",
		"select 1; select 2",
		"select 1;;",
		"set search_path = x",
		"select set_config('search_path', 'x', false)",
		"select pg_catalog.set_config('search_path', 'x', false)",
		"select pg_advisory_lock(1)",
		"select pg_try_advisory_lock(1)",
		"select nextval('s')",
		"select * from t",
		"select * from public.t",
		"select * from only t",
		"select * from generate_series(1, 2) g, t",
		"select * from generate_series(1, 2) g cross join t",
		"select * from generate_series(1, 2) g join t on true",
		"select * from (select 1) x",
		"select * from (values (1)) v",
		"select 1 from t where exists (select 1)",
		"select exists (select 1 from t)",
		"table t",
		"values (1) union select * from t",
		"select 1 into temp t",
		"select * into t from generate_series(1,2) g",
		"create temp table t (x int)",
		"prepare p as select 1",
		"listen c",
		"begin; select 1",
		"select 1 for update",
		"with x as (select 1) select * from x",
		"explain analyze select 1",
		"explain (analyze) select 1",
		"explain (format json) select 1",
		"select myfunc(1)",
		"select myschema.md5('x')",
		"select g.myfunc from generate_series(1, 2) g",
		"select (g).x from generate_series(1, 2) g",
		"select 1::mytype",
		"select 1::public.int4",
		"select mytype 'x'",
		"select 'x'::regclass",
		"select $1",
		"select $$x$$",
		"select \"x\"",
		"select U&'x'",
		"select 'unterminated",
		"select 1 /* unterminated",
		"select 1 ### 2",
		"select 1 @ 2",
		"select é",
		"select dblink_connect('x')",
		"select lo_open(1, 1)",
		"select pg_notify('c', 'x')",
		"select current_setting('x'), pg_sleep(1)",
		"select extract(year from now())",
		"do $$ begin end $$",
		"copy t to stdout",
		"discard all",
		"select 1 as x; set role y",
	}
	for _, q := range notInert {
		if inertText(q) {
			t.Errorf("inert, want not inert: %s", q)
		}
	}
}
