// read_avro.mjs — the independent reader of the lake's Avro files (Iceberg manifests and manifest
// lists) in the tests: npm avsc decodes FILE (header, sync markers, blocks, every object against the
// writer's schema) and this prints, as one JSON document, the header's metadata (UTF-8 text), the
// writer's schema as written (avro.schema, field ids included) and every object. Longs are decoded
// as BigInt (Iceberg snapshot ids use all 63 bits) and printed as digit strings; bytes as
// {"hex": "..."}.
//
//   node read_avro.mjs FILE
import avro from 'avsc'

const path = process.argv[2]

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

function printable(value) {
  if (value === null || value === undefined) return null
  if (typeof value === 'bigint') return value.toString()
  if (Buffer.isBuffer(value)) return { hex: value.toString('hex') }
  if (Array.isArray(value)) return value.map(printable)
  if (typeof value === 'object') {
    const out = {}
    for (const [k, v] of Object.entries(value)) out[k] = printable(v)
    return out
  }
  return value
}

const records = []
let header = null
const decoder = avro.createFileDecoder(path, {
  parseHook: schema => avro.Type.forSchema(schema, { registry: { long: longType } }),
})
decoder.on('metadata', (type, codec, h) => { header = { codec, meta: h.meta } })
decoder.on('data', record => records.push(record))
decoder.on('error', error => {
  process.stderr.write(`avsc could not read ${path}: ${error.stack || error}\n`)
  process.exit(1)
})
decoder.on('end', () => {
  const meta = {}
  for (const [key, value] of Object.entries(header.meta)) meta[key] = value.toString('utf8')
  const out = { codec: header.codec, meta, writer_schema: JSON.parse(meta['avro.schema']), records: printable(records) }
  process.stdout.write(JSON.stringify(out) + '\n')
})
