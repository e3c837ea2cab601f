// read_parquet_duckdb.mjs — a second independent reader of the lake's Parquet files in the tests:
// DuckDB (npm @duckdb/node-api) reads FILE with read_parquet and this prints, as one JSON document,
// the column types DuckDB inferred from the file and every row, each value put into an exact
// printable form by DuckDB itself:
//   BIGINT, DECIMAL, UUID -> their text (CAST AS VARCHAR), DATE -> days since 1970-01-01,
//   TIME -> microseconds since midnight, TIMESTAMP / TIMESTAMPTZ -> epoch_us, BLOB -> lower-case hex,
//   FLOAT / DOUBLE -> the number, or {"float": "NaN" | "Infinity" | "-Infinity" | "-0"}.
//
//   node read_parquet_duckdb.mjs FILE
import { DuckDBInstance } from '@duckdb/node-api'

const path = process.argv[2]
const instance = await DuckDBInstance.create(':memory:')
const connection = await instance.connect()
const source = `read_parquet('${path.replaceAll("'", "''")}')`

const described = (await connection.runAndReadAll(`DESCRIBE SELECT * FROM ${source}`)).getRowObjects()
const columns = described.map(row => ({ name: String(row.column_name), type: String(row.column_type) }))

function quoted(name) {
  return '"' + name.replaceAll('"', '""') + '"'
}

function expression({ name, type }) {
  const c = quoted(name)
  if (type === 'BIGINT' || type.startsWith('DECIMAL') || type === 'UUID') return `CAST(${c} AS VARCHAR)`
  if (type === 'DATE') return `(${c} - DATE '1970-01-01')`
  if (type === 'TIME') return `CAST(hour(${c}) AS BIGINT) * 3600000000 + minute(${c}) * 60000000 + microsecond(${c})`
  if (type === 'TIMESTAMP' || type === 'TIMESTAMP WITH TIME ZONE') return `CAST(epoch_us(${c}) AS VARCHAR)`
  if (type === 'BLOB') return `lower(hex(${c}))`
  return c
}

function printable(value) {
  if (value === null || value === undefined) return null
  if (typeof value === 'bigint') return value.toString()
  if (typeof value === 'number') {
    if (Number.isNaN(value)) return { float: 'NaN' }
    if (value === Infinity) return { float: 'Infinity' }
    if (value === -Infinity) return { float: '-Infinity' }
    if (Object.is(value, -0)) return { float: '-0' }
    return value
  }
  return value
}

const select = `SELECT ${columns.map(expression).join(', ')} FROM ${source}`
const rows = (await connection.runAndReadAll(select)).getRows().map(row => row.map(printable))
process.stdout.write(JSON.stringify({ columns, rows }) + '\n')
