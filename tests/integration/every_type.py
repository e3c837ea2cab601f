"""Every column type the output plugin can capture, with modifiers: the column
lists of tests/integration/test_apply_type_modifiers.py every_capturable_type_survives_every_apply_path.

Each entry is (column, type, value SQL of the row number `g`). SCALARS are every built-in scalar,
range and multirange type whose values a user can write (the input-less catalog types —
pg_node_tree, pg_ndistinct, pg_dependencies, pg_mcv_list, the BRIN summaries, gtsvector — cannot be
written, so nothing of them reaches the log), the modifier forms of char, varchar, bit, varbit,
numeric, time, timetz, timestamp, timestamptz and interval, an enum and two domains. COMPOUNDS are
the columns a typed parameter array could not carry (value_types.h BatchCastType): arrays (one- and
two-dimensional, of modified types, of an enum, a composite, a domain, a range), composites (one
with a quoted name holding parentheses), int2vector and oidvector.
"""

SCALARS = [
    ("c_int2", "smallint", "(g % 30000 - 15000)::smallint"),
    ("c_int4", "integer", "g * 7919 - 40000"),
    ("c_int8", "bigint", "g::bigint * 1000000007"),
    ("c_num", "numeric", "(g * 1.5 || '0')::numeric"),
    ("c_num102", "numeric(10,2)", "g * 1.25"),
    ("c_num5", "numeric(5)", "g % 99999"),
    ("c_real", "real", "(g / 3.0)::real"),
    ("c_float", "double precision",
     "CASE g % 9 WHEN 0 THEN 'NaN'::float8 WHEN 1 THEN '-Infinity'::float8 WHEN 2 THEN '-0'::float8 "
     "ELSE (g / 7.0)::float8 END"),
    ("c_money", "money", "(g * 1.01)::numeric::money"),
    ("c_text", "text", "E'q\"uo\\\\te\\ttab\\nline \\u00fcn\\u00ef ' || g || ' '"),
    ("c_varchar", "varchar(12)", "left('v' || g || 'xyzxyzxyz', 12)"),
    ("c_char3", "char(3)", "(ARRAY['USD', 'EU', 'J'])[g % 3 + 1]"),
    ("c_char8", "char(8)", "'c' || g"),
    ("c_name", "name", "'n' || g"),
    ("c_qchar", '"char"', "chr(65 + g % 26)::\"char\""),
    ("c_bytea", "bytea", "decode(md5(g::text), 'hex')"),
    ("c_bool", "boolean", "g % 2 = 0"),
    ("c_date", "date", "date '2026-01-01' + g"),
    ("c_time", "time(2)", "time '10:00:00.123456' + g * interval '1.01 second'"),
    ("c_timetz", "timetz(2)", "('10:00:0' || g % 10 || '.555' || CASE WHEN g % 2 = 0 THEN '+02' ELSE '-05:30' END)::timetz"),
    ("c_ts", "timestamp(0)", "timestamp '2026-03-01 10:11:12.6' + g * interval '1 hour'"),
    ("c_tstz", "timestamptz(3)", "timestamptz '2026-05-01 10:00:00.123456+03' + g * interval '1 minute'"),
    ("c_iv", "interval(3)", "g * interval '1 day 2.123456 seconds'"),
    ("c_ivhm", "interval hour to minute", "g * interval '3 hours 4 minutes 5 seconds'"),
    ("c_ivds", "interval day to second(3)", "g * interval '1 day 1.23456 seconds'"),
    ("c_ivy", "interval year", "g * interval '1 year 5 months'"),
    ("c_bit", "bit(4)", "(g % 16)::bit(4)"),
    ("c_varbit", "varbit(8)", "substring((g % 256)::bit(8) from 1 for g % 8 + 1)"),
    ("c_uuid", "uuid", "md5(g::text)::uuid"),
    ("c_inet", "inet", "('10.0.' || g % 256 || '.' || g % 200 + 1 || '/' || 24 + g % 9)::inet"),
    ("c_cidr", "cidr", "('10.' || g % 256 || '.0.0/16')::cidr"),
    ("c_mac", "macaddr", "('08:00:2b:01:02:' || lpad(to_hex(g % 256), 2, '0'))::macaddr"),
    ("c_mac8", "macaddr8", "('08:00:2b:01:02:03:04:' || lpad(to_hex(g % 256), 2, '0'))::macaddr8"),
    ("c_json", "json", "('{\"a\": [' || g || ', 1.50],  \"b\" : \"x\"}')::json"),
    ("c_jsonb", "jsonb", "jsonb_build_object('k', g, 'n', 1.50, 's', E'\\u00e9\"')"),
    ("c_jsonpath", "jsonpath", "('$.a[' || g % 5 || ']')::jsonpath"),
    ("c_xml", "xml", "('<r a=\"' || g || '\">t&amp;</r>')::xml"),
    ("c_point", "point", "point(g / 3.0, -g)"),
    ("c_line", "line", "line(point(0, 0), point(g, g + 1))"),
    ("c_lseg", "lseg", "lseg(point(0, g), point(g, 0))"),
    ("c_box", "box", "box(point(0, 0), point(g, g / 2.0))"),
    ("c_path", "path", "('[(0,0),(' || g || ',1),(2,' || g || ')]')::path"),
    ("c_polygon", "polygon", "('((0,0),(' || g || ',0),(0,' || g || '))')::polygon"),
    ("c_circle", "circle", "circle(point(g, 1), g / 4.0 + 1)"),
    ("c_tsvector", "tsvector", "to_tsvector('simple', 'word' || g || ' other quick')"),
    ("c_tsquery", "tsquery", "('a' || g || ' & !b')::tsquery"),
    ("c_int4range", "int4range", "int4range(g, g + 10)"),
    ("c_int8range", "int8range", "int8range(g, NULL)"),
    ("c_numrange", "numrange", "numrange(g / 3.0, g + 1, '[]')"),
    ("c_daterange", "daterange", "daterange('2026-01-01'::date, '2026-01-01'::date + g)"),
    ("c_tsrange", "tsrange", "tsrange('2026-01-01', '2026-01-01'::timestamp + g * interval '1 hour')"),
    ("c_tstzrange", "tstzrange", "tstzrange('2026-01-01+00', '2026-01-01+00'::timestamptz + g * interval '1 hour')"),
    ("c_int4multi", "int4multirange", "int4multirange(int4range(1, g + 2), int4range(g + 5, g + 9))"),
    ("c_nummulti", "nummultirange", "nummultirange(numrange(0.5, g + 0.5))"),
    ("c_datemulti", "datemultirange", "datemultirange(daterange('2026-01-01', '2026-02-01'))"),
    ("c_lsn", "pg_lsn", "('0/' || to_hex(g * 4096))::pg_lsn"),
    ("c_oid", "oid", "(g + 100)::oid"),
    ("c_regclass", "regclass", "'pg_catalog.pg_class'::regclass"),
    ("c_regtype", "regtype", "(ARRAY['integer', 'text', 'numeric(10,2)'])[g % 3 + 1]::regtype"),
    ("c_regproc", "regprocedure", "'abs(integer)'::regprocedure"),
    ("c_regnamespace", "regnamespace", "'pg_catalog'::regnamespace"),
    ("c_regrole", "regrole", "'postgres'::regrole"),
    ("c_regconfig", "regconfig", "'simple'::regconfig"),
    ("c_snapshot", "pg_snapshot", "('10:' || 20 + g || ':12,15')::pg_snapshot"),
    ("c_txidsnap", "txid_snapshot", "('10:' || 20 + g || ':12')::txid_snapshot"),
    ("c_xid", "xid", "(g + 3)::text::xid"),
    ("c_xid8", "xid8", "(g + 3)::text::xid8"),
    ("c_cid", "cid", "(g % 100)::text::cid"),
    ("c_tid", "tid", "('(' || g || ',' || g % 7 || ')')::tid"),
    ("c_refcursor", "refcursor", "('cur' || g)::refcursor"),
    ("c_aclitem", "aclitem", "'postgres=arw/postgres'::aclitem"),
    ("c_mood", "public.mood", "(ARRAY['sad', 'ok', 'glad'])[g % 3 + 1]::public.mood"),
    ("c_code", "public.code", "('k' || g % 1000)::public.code"),
    ("c_cents", "public.cents", "g * 0.5"),
]
COMPOUNDS = [
    ("a_int", "integer[]", "ARRAY[g, NULL, -g]"),
    ("a_text", "text[]", "ARRAY['q\"uo' || g, NULL, 'NULL', '', '{a,b}', E'back\\\\slash']"),
    ("a_char3", "char(3)[]", "ARRAY['ab', 'xyz']::char(3)[]"),
    ("a_num", "numeric(10,2)[]", "ARRAY[g * 1.5, 1]"),
    ("a_ts2d", "timestamp(0)[][]",
     "ARRAY[[timestamp '2026-01-01 10:00:00.7' + g * interval '1 s', NULL], [NULL, timestamp '2026-01-02']]"),
    ("a_iv", "interval hour to minute[]", "ARRAY[g * interval '1 hour 2 minutes 3 seconds']"),
    ("a_mood", "public.mood[]", "ARRAY['sad', 'glad']::public.mood[]"),
    ("a_pair", "public.pair", "ROW(g, 'p ' || g)::public.pair"),
    ("a_pairs", "public.pair[]", "ARRAY[ROW(g, 'x,y')::public.pair, ROW(NULL, NULL)::public.pair]"),
    ("a_code", "public.code[]", "ARRAY['k' || g % 100]::public.code[]"),
    ("a_jsonb", "jsonb[]", "ARRAY[jsonb_build_object('g', g)]"),
    ("a_point", "point[]", "ARRAY[point(g, 1)]"),
    ("a_range", "int4range[]", "ARRAY[int4range(1, g + 2)]"),
    ("a_odd", 'public."odd(name)"', 'ROW(g)::public."odd(name)"'),
    ("a_int2vector", "int2vector", "(g % 9 || ' ' || g % 5)::int2vector"),
    ("a_oidvector", "oidvector", "(g || ' 23')::oidvector"),
    ("a_empty", "integer[]", "'{}'::integer[]"),
]
TYPES_DDL = """
CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'glad');
CREATE TYPE public.pair AS (a int, b text);
CREATE TYPE public."odd(name)" AS (x int);
CREATE DOMAIN public.code AS varchar(5);
CREATE DOMAIN public.cents AS numeric(10,2);
"""


def columns_sql(columns):
    return ", ".join(f"{c} {t}" for c, t, _ in columns)


def values_sql(columns, overrides=None):
    """Each column's value for the row numbered `g` (a column of the FROM list), or the SQL
    `overrides` gives for it; every other column NULL in one row of 13."""
    overrides = overrides or {}
    return ", ".join(overrides[c] if c in overrides else f"CASE WHEN g % 13 = 0 THEN NULL ELSE ({v}) END"
                     for c, _, v in columns)
