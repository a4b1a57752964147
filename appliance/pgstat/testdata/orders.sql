CREATE TABLE orders AS SELECT g AS id, g % 1000 AS customer_id, g % 500 AS region, md5(g::text) AS note
  FROM generate_series(1, 100000) g;
ALTER TABLE orders ADD PRIMARY KEY (id);
ANALYZE orders;
CREATE FUNCTION pick(v int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'pick() runs as %', current_user; RETURN v; END $$;
