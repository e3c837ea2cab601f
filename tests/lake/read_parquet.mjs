// read_parquet.mjs — the independent reader of the lake's Parquet files in the tests: npm hyparquet
// (with hyparquet-compressors for ZSTD) reads FILE and this prints, as one JSON document on stdout,
// the footer as hyparquet parsed it (schema, row groups, column chunk statistics) and every row.
// It decodes nothing itself: the values are hyparquet's, only made printable as JSON (statistics of
// string and binary columns as hex, see metadataParsers):
//   bigint -> {"bigint": "<digits>"}, NaN/Infinity/-0 -> {"float": "NaN" | "Infinity" | "-Infinity" | "-0"},
//   bytes -> {"hex": "..."}, timestamps -> {"micros": "<digits>"} (hyparquet's timestamp parser,
//   given the raw microseconds), dates -> {"days": N} (its date parser, given the raw days).
// Decimals: hyparquet turns them into JS numbers (inexact beyond 2^53), so each decimal column is
// also read a second time with its decimal annotation removed from the parsed footer, giving the
// stored unscaled integer: {"decimal": <hyparquet's number>, "unscaled": "<digits>"}.
//
//   node read_parquet.mjs FILE
import { readFileSync } from 'node:fs'
import { parquetMetadata, parquetReadObjects } from 'hyparquet'
import { compressors } from 'hyparquet-compressors'

const path = process.argv[2]
const bytes = readFileSync(path)
const file = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)

const parsers = {
  timestampFromMilliseconds: v => ({ millis: String(v) }),
  timestampFromMicroseconds: v => ({ micros: String(v) }),
  timestampFromNanoseconds: v => ({ nanos: String(v) }),
  dateFromDays: v => ({ days: v }),
}

function printable(value) {
  if (value === null || value === undefined) return null
  if (typeof value === 'bigint') return { bigint: value.toString() }
  if (typeof value === 'number') {
    if (Number.isNaN(value)) return { float: 'NaN' }
    if (value === Infinity) return { float: 'Infinity' }
    if (value === -Infinity) return { float: '-Infinity' }
    if (Object.is(value, -0)) return { float: '-0' }
    return value
  }
  if (value instanceof Uint8Array) return { hex: Buffer.from(value).toString('hex') }
  if (Array.isArray(value)) return value.map(printable)
  if (typeof value === 'object') {
    const out = {}
    for (const [k, v] of Object.entries(value)) out[k] = printable(v)
    return out
  }
  return value
}

// Big-endian two's complement bytes, an int32 number or an int64 bigint -> unscaled digits.
function unscaledOf(raw) {
  if (raw === null || raw === undefined) return null
  if (raw instanceof Uint8Array) {
    let value = 0n
    for (const b of raw) value = value * 256n + BigInt(b)
    if (raw.length && raw[0] & 0x80) value -= 1n << BigInt(8 * raw.length)
    return value.toString()
  }
  return BigInt(raw).toString()
}

// Statistics of BYTE_ARRAY columns would be decoded as UTF-8 text (binary ones too, with
// replacement characters): the footer is parsed with their bytes kept, printed as hex.
const metadataParsers = { ...parsers, stringFromBytes: b => b && { hex: Buffer.from(b).toString('hex') } }
const metadata = parquetMetadata(file, { parsers: metadataParsers })
const rows = await parquetReadObjects({ file, metadata, compressors, parsers, utf8: false })

const leaves = metadata.schema.slice(1)
const decimals = leaves.filter(e => e.converted_type === 'DECIMAL' || e.logical_type?.type === 'DECIMAL')
if (decimals.length) {
  const rawMetadata = parquetMetadata(file, { parsers: metadataParsers })
  for (const element of rawMetadata.schema) {
    if (decimals.some(d => d.name === element.name)) {
      delete element.converted_type
      delete element.logical_type
    }
  }
  const rawRows = await parquetReadObjects({ file, metadata: rawMetadata, compressors, parsers, utf8: false,
    columns: decimals.map(d => d.name) })
  rows.forEach((row, i) => {
    for (const d of decimals) {
      row[d.name] = row[d.name] === null || row[d.name] === undefined
        ? null : { decimal: row[d.name], unscaled: unscaledOf(rawRows[i][d.name]) }
    }
  })
}

const footer = {
  version: metadata.version,
  num_rows: metadata.num_rows,
  created_by: metadata.created_by,
  schema: metadata.schema,
  row_groups: metadata.row_groups.map(g => ({
    num_rows: g.num_rows,
    total_byte_size: g.total_byte_size,
    columns: g.columns.map(c => ({
      file_offset: c.file_offset,
      type: c.meta_data.type,
      encodings: c.meta_data.encodings,
      path_in_schema: c.meta_data.path_in_schema,
      codec: c.meta_data.codec,
      num_values: c.meta_data.num_values,
      data_page_offset: c.meta_data.data_page_offset,
      total_compressed_size: c.meta_data.total_compressed_size,
      statistics: c.meta_data.statistics,
    })),
  })),
}
process.stdout.write(JSON.stringify(printable({ footer, rows })) + '\n')
