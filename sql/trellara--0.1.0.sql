-- trellara--0.1.0.sql — the SQL surface of the Trellara extension, version 0.1.0.
--
-- Creates the functions of schema trellara (the schema itself comes from trellara.control) and
-- their privileges: nothing is executable by PUBLIC; read-only functions are granted to
-- pg_monitor; trellara_admin is the role for operating Trellara (see docs/decisions.md).
-- Must never drop or alter objects it did not create, and never grant anything to PUBLIC.

\echo Use "CREATE EXTENSION trellara" to load this file. \quit

CREATE FUNCTION trellara.version()
RETURNS text
AS 'MODULE_PATHNAME', 'trellara_version'
LANGUAGE C STRICT STABLE PARALLEL SAFE;

COMMENT ON FUNCTION trellara.version() IS
  'Version of the loaded trellara shared library (compare with pg_extension.extversion)';

-- STABLE, not IMMUTABLE: the rendering may change between Trellara versions, so it must not be
-- frozen into expression indexes or materialised constants.
CREATE FUNCTION trellara.envelope_json(record bytea)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'trellara_envelope_json'
LANGUAGE C STRICT STABLE PARALLEL SAFE;

COMMENT ON FUNCTION trellara.envelope_json(bytea) IS
  'Renders one Trellara log record (Envelope, Chunk, Manifest or CommitMarker) as JSON; '
  'raises invalid_binary_representation (22P03) for bytes that are not a valid record';

-- trellara_admin: the role that operates Trellara (flows, quarantine replay in later versions).
-- Roles are cluster-wide and cannot belong to an extension, so the script creates it only when
-- it is absent, as NOLOGIN, and DROP EXTENSION leaves it; a DBA grants it to people or to the
-- applier's login role. An existing role of that name is used as it is.
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'trellara_admin') THEN
    CREATE ROLE trellara_admin NOLOGIN;
  END IF;
END
$$;

REVOKE ALL ON FUNCTION trellara.version() FROM PUBLIC;
REVOKE ALL ON FUNCTION trellara.envelope_json(bytea) FROM PUBLIC;

-- Read-only functions: monitoring roles and Trellara operators.
GRANT USAGE ON SCHEMA trellara TO pg_monitor, trellara_admin;
GRANT EXECUTE ON FUNCTION trellara.version() TO pg_monitor, trellara_admin;
GRANT EXECUTE ON FUNCTION trellara.envelope_json(bytea) TO pg_monitor, trellara_admin;
