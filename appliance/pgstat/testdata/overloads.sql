-- A tenant's overloads of built-in functions the readings call: names resolved through the tenant's
-- public schema would pick them (they are more specific than the polymorphic built-ins) and run them
-- with the reader's rights.
CREATE FUNCTION public.cardinality(a int[]) RETURNS int LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'overload cardinality() runs as %', current_user; RETURN 0; END $$;
CREATE FUNCTION public.array_append(a text[], e text) RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN RAISE NOTICE 'overload array_append() runs as %', current_user; RETURN a || e; END $$;
