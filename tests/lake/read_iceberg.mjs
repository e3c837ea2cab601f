// read_iceberg.mjs — the independent reader of a whole lake table in the tests: from an Iceberg
// (format version 2) metadata file it follows the current snapshot to its manifest list, every
// manifest the list names and every data file those manifests hold, and prints one JSON document:
//
//   {"format_version", "table_uuid", "current_snapshot_id",
//    "snapshots": [{"snapshot_id", "parent_snapshot_id", "sequence_number", "summary", "manifest_list"}],
//    "schema": [{"id", "name", "type", "required"}],
//    "data_files": [{"path", "record_count", "file_size_in_bytes", "sequence_number", "snapshot_id"}],
//    "rows": [{column name: value}, ...],        (data files in manifest-list order, rows in file order)
//    "icebird_rows": N, "icebird_agrees": true | false}   (or "icebird_error": "...")
//
// Nothing of Trellara's is used: the metadata is JSON (parsed keeping 64-bit integers exact), the
// manifest list and manifests are decoded by npm avsc (longs as BigInt), the data files by npm
// hyparquet (+ hyparquet-compressors for ZSTD). Columns are matched to the schema by Parquet field
// id. Values: 64-bit integers (long, time, timestamp, timestamptz as microseconds, ids, counts) are
// printed as exact JSON integers; date as days; decimal as its exact text ("-12.30", read from the
// unscaled value); float/double NaN and infinities as "NaN" / "Infinity" / "-Infinity"; string
// as text; binary as {"hex"}; uuid as hyparquet's text; null as null.
//
// It fails (exit 1, the reason on stderr) on anything it does not expect of the lake's tables
// rather than guess: a format version other than 2, a missing current snapshot or schema, a
// manifest list whose header names another snapshot, a manifest length or data file size that is
// not the file's size on disk, a delete manifest, a DELETED manifest entry or a delete file (the
// lake only appends), a data file that is not Parquet, a row count other than record_count, a
// missing file.
//
// Then the same table is read a second time by npm icebird (an Iceberg reader built on hyparquet,
// with its own Avro decoder and its own walk of snapshot -> manifest list -> manifests -> files).
// icebird fetches everything with fetch(), which in Node reads no local files: while it runs,
// globalThis.fetch is replaced by one that serves absolute paths and file:// URLs from disk (the
// whole file, status 200, as a server without range requests would; 404 when missing) and refuses
// anything else, so nothing leaves the machine. icebird gives timestamps and dates as JS Dates
// (milliseconds), decimals as JS numbers computed in floating point and binary as UTF-8 text:
// uuids as 16 bytes: timestamps are compared at the millisecond, decimals within a relative 2^-50
// of the exact value, uuids as bytes,
// binary after the same UTF-8 decoding (lossy for bytes that are not UTF-8); every other value
// exactly.
//
//   node read_iceberg.mjs METADATA.json
//   (icebird expects METADATA.json in the table's metadata/ folder: tableUrl is its parent's parent)
import { readFileSync, statSync } from 'node:fs'
import { basename, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'
import avro from 'avsc'
import { parquetMetadata, parquetReadObjects } from 'hyparquet'
import { compressors } from 'hyparquet-compressors'
import { icebergRead } from 'icebird'

const STATUS_EXISTING = 0
const STATUS_ADDED = 1
const STATUS_DELETED = 2
const CONTENT_DATA = 0

function fail(message) {
  process.stderr.write(`read_iceberg: ${message}\n`)
  process.exit(1)
}

// JSON.parse turns integers above 2^53 into nearest doubles (snapshot ids use 63 bits): integer
// literals outside strings that are not safe integers are parsed as BigInt instead.
function parseJsonExact(text) {
  let out = ''
  for (let i = 0; i < text.length;) {
    const c = text[i]
    if (c === '"') {
      let j = i + 1
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1
      out += text.slice(i, j + 1)
      i = j + 1
    } else if (c === '-' || (c >= '0' && c <= '9')) {
      const token = /^-?\d+(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i, i + 64))[0]
      const integer = /^-?\d+$/.test(token)
      out += integer && !Number.isSafeInteger(Number(token)) ? `{"$bigint":"${token}"}` : token
      i += token.length
    } else {
      out += c
      i++
    }
  }
  return JSON.parse(out, (key, value) =>
    value && typeof value === 'object' && typeof value.$bigint === 'string' ? BigInt(value.$bigint) : value)
}

// Prints BigInts as bare JSON integers (JSON.stringify cannot).
function stringifyExact(value) {
  return JSON.stringify(value, (key, v) => (typeof v === 'bigint' ? `\u0000bigint:${v}` : v))
    .replace(/"\\u0000bigint:(-?\d+)"/g, '$1')
}

const longType = avro.types.LongType.__with({
  fromBuffer: buf => buf.readBigInt64LE(),
  toBuffer: n => {
    const buf = Buffer.alloc(8)
    buf.writeBigInt64LE(BigInt(n))
    return buf
  },
  fromJSON: BigInt,
  toJSON: Number,
  isValid: n => typeof n === 'bigint',
  compare: (a, b) => (a === b ? 0 : a < b ? -1 : 1),
})

function readAvro(path) {
  return new Promise((resolve, reject) => {
    const records = []
    let meta = null
    const decoder = avro.createFileDecoder(path, {
      parseHook: schema => avro.Type.forSchema(schema, { registry: { long: longType } }),
    })
    decoder.on('metadata', (type, codec, header) => {
      meta = {}
      for (const [key, value] of Object.entries(header.meta)) meta[key] = value.toString('utf8')
    })
    decoder.on('data', record => records.push(record))
    decoder.on('error', error => reject(new Error(`avsc could not read ${path}: ${error.message}`)))
    decoder.on('end', () => resolve({ meta, records }))
  })
}

function sizeOf(path, what) {
  try {
    return BigInt(statSync(path).size)
  } catch (error) {
    fail(`${what} ${path} cannot be read: ${error.message}`)
  }
}

function decimalText(unscaled, scale) {
  const negative = unscaled < 0n
  let digits = (negative ? -unscaled : unscaled).toString()
  if (scale > 0) {
    digits = digits.padStart(scale + 1, '0')
    digits = `${digits.slice(0, -scale)}.${digits.slice(-scale)}`
  }
  return (negative ? '-' : '') + digits
}

// Big-endian two's complement bytes, an int32 number or an int64 bigint -> BigInt.
function unscaledOf(raw) {
  if (raw instanceof Uint8Array) {
    let value = 0n
    for (const b of raw) value = value * 256n + BigInt(b)
    if (raw.length && raw[0] & 0x80) value -= 1n << BigInt(8 * raw.length)
    return value
  }
  return BigInt(raw)
}

function printableValue(field, value) {
  if (value === null || value === undefined) return null
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value)
  if (value instanceof Uint8Array) return { hex: Buffer.from(value).toString('hex') }
  return value
}

const parsers = {
  timestampFromMilliseconds: v => fail(`a millisecond timestamp (${v}): the lake writes microseconds`),
  timestampFromMicroseconds: v => v,
  timestampFromNanoseconds: v => fail(`a nanosecond timestamp (${v}): the lake writes microseconds`),
  dateFromDays: v => v,
}

async function readDataFile(path, schema) {
  const bytes = readFileSync(path)
  const file = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)
  let metadata
  try {
    metadata = parquetMetadata(file, { parsers })
  } catch (error) {
    fail(`hyparquet could not read the footer of ${path}: ${error.message}`)
  }
  const byId = new Map(metadata.schema.slice(1).map(e => [e.field_id, e]))
  const columns = []
  for (const field of schema.fields) {
    const element = byId.get(field.id)
    if (!element) fail(`data file ${path} has no column with field id ${field.id} (${field.name})`)
    columns.push({ field, element })
  }
  let rows
  try {
    rows = await parquetReadObjects({ file, metadata, compressors, parsers, utf8: false })
  } catch (error) {
    fail(`hyparquet could not read the rows of ${path}: ${error.message}`)
  }
  // Decimals: hyparquet gives JS numbers; the unscaled integers come from a second read of those
  // columns with their decimal annotation removed.
  const decimals = columns.filter(c => String(c.field.type).startsWith('decimal'))
  let raw = null
  if (decimals.length) {
    const rawMetadata = parquetMetadata(file, { parsers })
    for (const element of rawMetadata.schema) {
      if (decimals.some(d => d.element.name === element.name)) {
        delete element.converted_type
        delete element.logical_type
      }
    }
    raw = await parquetReadObjects({ file, metadata: rawMetadata, compressors, parsers, utf8: false,
      columns: decimals.map(d => d.element.name) })
  }
  return rows.map((row, i) => {
    const out = {}
    for (const { field, element } of columns) {
      const value = row[element.name]
      if (String(field.type).startsWith('decimal') && value !== null && value !== undefined) {
        const scale = Number(/decimal\(\s*\d+\s*,\s*(\d+)\s*\)/.exec(field.type)[1])
        out[field.name] = decimalText(unscaledOf(raw[i][element.name]), scale)
      } else {
        out[field.name] = printableValue(field, value)
      }
    }
    return out
  })
}

// The value icebird should give for OURS (as printed above), at icebird's precision.
function comparable(field, ours) {
  if (ours === null) return null
  if (field.type === 'timestamp' || field.type === 'timestamptz') return { ms: Number(BigInt(ours) / 1000n) }
  if (field.type === 'date') return { ms: Number(ours) * 86400000 }
  if (String(field.type).startsWith('decimal')) return Number(ours)
  // icebird reads binary columns as UTF-8 text (hyparquet's utf8 default), replacing bytes that
  // are not UTF-8: the bytes read here are compared decoded the same way.
  if (field.type === 'binary') return new TextDecoder().decode(Buffer.from(ours.hex, 'hex'))
  // icebird's hyparquet (1.19) gives a uuid as its 16 bytes, not text.
  if (field.type === 'uuid') return { hex: ours.replaceAll('-', '') }
  return ours
}

function icebirdComparable(value) {
  if (value === null || value === undefined) return null
  if (value instanceof Date) return { ms: value.getTime() }
  return printableValue(null, value)
}

function same(a, b) {
  return stringifyExact(a) === stringifyExact(b)
}

// Serves absolute paths and file:// URLs from disk; refuses everything else (no network).
async function localFetch(url) {
  const text = String(url)
  const path = text.startsWith('file://') ? fileURLToPath(text) : text
  if (!path.startsWith('/')) throw new Error(`read_iceberg refuses to fetch ${text}: only local files`)
  try {
    return new Response(readFileSync(path), { status: 200 })
  } catch {
    return new Response(null, { status: 404, statusText: 'Not Found' })
  }
}

async function readWithIcebird(metadataPath, schema, rows) {
  const realFetch = globalThis.fetch
  globalThis.fetch = localFetch
  try {
    const read = await icebergRead({ tableUrl: dirname(dirname(metadataPath)),
      metadataFileName: basename(metadataPath) })
    let agrees = read.length === rows.length
    for (let i = 0; agrees && i < rows.length; i++) {
      for (const field of schema.fields) {
        const want = comparable(field, rows[i][field.name])
        const got = icebirdComparable(read[i][field.name])
        // icebird's decimals are unscaled * 10^-scale in floating point (-99.0001 comes out as
        // -99.00009999999999): equal within a relative 2^-50, a few units in the last place.
        const close = typeof want === 'number' && typeof got === 'number' && String(field.type).startsWith('decimal') &&
          Math.abs(want - got) <= Math.abs(want) * 2 ** -50
        if (!same(want, got) && !close) {
          process.stderr.write(`read_iceberg: icebird row ${i} column ${field.name}: ${stringifyExact(got)}, ` +
            `avsc+hyparquet read ${stringifyExact(want)}\n`)
          agrees = false
          break
        }
      }
    }
    return { icebird_rows: read.length, icebird_agrees: agrees }
  } catch (error) {
    return { icebird_error: String(error.message || error) }
  } finally {
    globalThis.fetch = realFetch
  }
}

const metadataPath = process.argv[2]
if (!metadataPath) fail('usage: node read_iceberg.mjs METADATA.json')
let table
try {
  table = parseJsonExact(readFileSync(metadataPath, 'utf8'))
} catch (error) {
  fail(`cannot read the metadata file ${metadataPath}: ${error.message}`)
}
if (table['format-version'] !== 2) fail(`${metadataPath}: format-version ${table['format-version']}, expected 2`)
const schema = table.schemas.find(s => s['schema-id'] === table['current-schema-id'])
if (!schema) fail(`${metadataPath}: current schema ${table['current-schema-id']} is not among its schemas`)
const currentId = table['current-snapshot-id']
const current = (table.snapshots ?? []).find(s => BigInt(s['snapshot-id']) === BigInt(currentId))
if (currentId === undefined || !current) fail(`${metadataPath}: current snapshot ${currentId} is not among its snapshots`)

const list = await readAvro(current['manifest-list']).catch(error => fail(error.message))
if (BigInt(list.meta['snapshot-id']) !== BigInt(currentId)) {
  fail(`manifest list ${current['manifest-list']} is of snapshot ${list.meta['snapshot-id']}, the metadata's current ` +
    `snapshot is ${currentId}`)
}
const dataFiles = []
for (const m of list.records) {
  const where = `manifest ${m.manifest_path} (listed by ${current['manifest-list']})`
  if (m.content !== CONTENT_DATA) fail(`${where} is a delete manifest (content ${m.content}): the lake writes none`)
  const length = sizeOf(m.manifest_path, where)
  if (length !== m.manifest_length) fail(`${where} is ${length} bytes on disk, the list says ${m.manifest_length}`)
  const manifest = await readAvro(m.manifest_path).catch(error => fail(error.message))
  for (const entry of manifest.records) {
    const file = entry.data_file
    if (entry.status === STATUS_DELETED) fail(`${where}: entry for ${file.file_path} is DELETED: the lake never deletes`)
    if (entry.status !== STATUS_ADDED && entry.status !== STATUS_EXISTING) fail(`${where}: entry status ${entry.status}`)
    if (file.content !== CONTENT_DATA) fail(`${where}: ${file.file_path} is a delete file (content ${file.content})`)
    if (file.file_format !== 'PARQUET') fail(`${where}: ${file.file_path} is ${file.file_format}, not PARQUET`)
    // Sequence number inheritance (spec): a null sequence number of an ADDED entry is the manifest's.
    const sequence = entry.sequence_number ?? (entry.status === STATUS_ADDED ? m.sequence_number : null)
    if (sequence === null) fail(`${where}: EXISTING entry for ${file.file_path} without a sequence number`)
    const size = sizeOf(file.file_path, `data file (in ${where})`)
    if (size !== file.file_size_in_bytes) {
      fail(`data file ${file.file_path} is ${size} bytes on disk, its manifest entry says ${file.file_size_in_bytes}`)
    }
    dataFiles.push({ path: file.file_path, record_count: file.record_count, file_size_in_bytes: file.file_size_in_bytes,
      sequence_number: sequence, snapshot_id: entry.snapshot_id })
  }
}

const rows = []
for (const file of dataFiles) {
  const read = await readDataFile(file.path, schema)
  if (BigInt(read.length) !== file.record_count) {
    fail(`data file ${file.path} holds ${read.length} rows, its manifest entry says ${file.record_count}`)
  }
  rows.push(...read)
}

const out = {
  format_version: table['format-version'],
  table_uuid: table['table-uuid'],
  current_snapshot_id: currentId,
  snapshots: table.snapshots.map(s => ({
    snapshot_id: s['snapshot-id'],
    parent_snapshot_id: s['parent-snapshot-id'] ?? null,
    sequence_number: s['sequence-number'],
    summary: s.summary,
    manifest_list: s['manifest-list'],
  })),
  schema: schema.fields.map(f => ({ id: f.id, name: f.name, type: f.type, required: f.required })),
  data_files: dataFiles,
  rows,
  ...(await readWithIcebird(metadataPath, schema, rows)),
}
process.stdout.write(stringifyExact(out) + '\n')
