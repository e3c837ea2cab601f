-- basic: CREATE EXTENSION, trellara.version(), trellara.envelope_json() on every sample record
-- kind and on invalid input. Invalid input must raise ERROR 22P03 naming what is wrong and the
-- session must keep working afterwards. Output must stay deterministic: no OIDs, times or paths.
\set VERBOSITY default
CREATE EXTENSION trellara;

-- The loaded library and the installed SQL script are the same version.
SELECT trellara.version() = extversion AS library_matches_script
  FROM pg_extension WHERE extname = 'trellara';
SELECT trellara.version();

-- Nothing in schema trellara is executable by PUBLIC (expect no rows).
SELECT p.oid::regprocedure AS executable_by_public
  FROM pg_proc p
 WHERE p.pronamespace = 'trellara'::regnamespace
   AND has_function_privilege('public', p.oid, 'EXECUTE');
-- The read-only functions are granted to pg_monitor and trellara_admin.
SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS arguments,
       p.provolatile, p.proisstrict,
       (SELECT string_agg(a.grantee::regrole::text, ', ' ORDER BY a.grantee::regrole::text)
          FROM aclexplode(p.proacl) a WHERE a.grantee <> p.proowner) AS granted_to
  FROM pg_proc p
 WHERE p.pronamespace = 'trellara'::regnamespace AND p.proname IN ('version', 'envelope_json')
 ORDER BY p.proname;
SELECT rolname, rolcanlogin, rolsuper FROM pg_roles WHERE rolname = 'trellara_admin';

-- The sample records (committed as hex by the codec tests) are read by psql on the client side.
\getenv abs_srcdir PG_ABS_SRCDIR
\set fixtures :abs_srcdir/../tests/fixtures
\set envelope_hex `cat :fixtures/envelope-sample.hex`
\set chunk_hex `cat :fixtures/chunk-sample.hex`
\set manifest_hex `cat :fixtures/manifest-sample.hex`
\set commit_marker_hex `cat :fixtures/commit-marker-sample.hex`

-- Every record kind renders (unaligned, so the JSON reads as JSON).
\pset format unaligned
\pset tuples_only on
SELECT jsonb_pretty(trellara.envelope_json(decode(:'envelope_hex', 'hex'))) AS envelope;
SELECT jsonb_pretty(trellara.envelope_json(decode(:'chunk_hex', 'hex'))) AS chunk;
SELECT jsonb_pretty(trellara.envelope_json(decode(:'manifest_hex', 'hex'))) AS manifest;
SELECT jsonb_pretty(trellara.envelope_json(decode(:'commit_marker_hex', 'hex'))) AS commit_marker;
\pset format aligned
\pset tuples_only off

-- A tampered value still decodes: it is rendered, and its checksum is reported as a mismatch.
SELECT j->>'type' AS type, j->>'checksum_status' AS checksum_status,
       j#>>'{changes,2,new,note}' AS tampered_note
  FROM trellara.envelope_json(decode(replace(:'envelope_hex', '6368616e676564', '6368416e676564'),
                                     'hex')) AS j;

-- Invalid records: ERROR with what is wrong and a hint; never a crash.
SELECT trellara.envelope_json('\xdeadbeef');
SELECT trellara.envelope_json(''::bytea);
SELECT trellara.envelope_json(substr(decode(:'envelope_hex', 'hex'), 1, 100));
-- The session keeps working after those errors.
SELECT trellara.version() AS still_working;
-- NULL in, NULL out (STRICT).
SELECT trellara.envelope_json(NULL) IS NULL AS null_in_null_out;
-- The error carries SQLSTATE 22P03 and can be caught like any Postgres error.
DO $$
BEGIN
  PERFORM trellara.envelope_json('\xdeadbeef');
EXCEPTION WHEN invalid_binary_representation THEN
  RAISE NOTICE 'caught invalid_binary_representation (SQLSTATE %)', SQLSTATE;
END
$$;
-- Many invalid inputs in one statement, each caught: the backend survives all of them.
DO $$
DECLARE
  failures int := 0;
BEGIN
  FOR i IN 1..200 LOOP
    BEGIN
      PERFORM trellara.envelope_json(decode(md5(i::text) || md5((i * 7)::text), 'hex'));
    EXCEPTION WHEN invalid_binary_representation THEN
      failures := failures + 1;
    END;
  END LOOP;
  RAISE NOTICE '% of 200 random inputs rejected', failures;
END
$$;

-- Privileges: a role without grants cannot call the functions; a pg_monitor member can.
CREATE ROLE regress_trellara_nobody;
CREATE ROLE regress_trellara_monitor IN ROLE pg_monitor;
SET ROLE regress_trellara_nobody;
SELECT trellara.version();
RESET ROLE;
SET ROLE regress_trellara_monitor;
SELECT trellara.version() AS monitor_sees_version;
SELECT trellara.envelope_json(decode(:'commit_marker_hex', 'hex'))->>'type' AS monitor_renders;
RESET ROLE;
DROP ROLE regress_trellara_nobody;
DROP ROLE regress_trellara_monitor;

-- Dropping and re-creating the extension works; trellara_admin outlives it (cluster-wide role).
DROP EXTENSION trellara;
SELECT count(*) AS trellara_admin_kept FROM pg_roles WHERE rolname = 'trellara_admin';
CREATE EXTENSION trellara;
SELECT trellara.version() AS recreated;
DROP EXTENSION trellara;
