// SchemaStore's checks (its cli.js `check` task) run on the draft-07
// rendering, with the repository's examples as positive tests and
// negative_test/ as negative tests. It stages them in SchemaStore's layout
// (src/schemas/json, src/test/<name>, src/negative_test/<name>), so the
// pragma check sees the paths a submission has, and with --out DIR it
// leaves that tree in DIR, ready to copy into a SchemaStore checkout.
// Exit status 0: every check passed; 1: one failed (the message says which).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

import { Ajv } from 'ajv'
import addFormats from 'ajv-formats'
import ajvKeywords from 'ajv-keywords'
import { ajvFormatsDraft2019 } from '@hyperupcall/ajv-formats-draft2019'
import YAML from 'yaml'

const here = path.dirname(fileURLToPath(import.meta.url))
const repo = path.resolve(here, '../..')
const name = 'tqw-workflow'
// Keywords outside SchemaStore's built-in list, declared for this schema
// in its src/schema-validation.jsonc (see README.md).
const unknownKeywords = ['patternErrorMessage', 'errorMessage']

let failures = 0
function fail(msg) {
  console.error(`FAIL: ${msg}`)
  failures++
}

const outArg = process.argv.indexOf('--out')
const stage = outArg > 0 ? path.resolve(process.argv[outArg + 1]) : fs.mkdtempSync(path.join(os.tmpdir(), 'schemastore-'))
const schemaDir = path.join(stage, 'src/schemas/json')
const posDir = path.join(stage, 'src/test', name)
const negDir = path.join(stage, 'src/negative_test', name)
for (const d of [schemaDir, posDir, negDir]) fs.mkdirSync(d, { recursive: true })

const schemaPath = path.join(schemaDir, `${name}.json`)
fs.copyFileSync(path.join(here, `${name}.json`), schemaPath)
function stageTests(fromDir, files, toDir) {
  for (const f of files) {
    const text = fs.readFileSync(path.join(fromDir, f), 'utf-8')
    const pragma = `# yaml-language-server: $schema=${path.relative(toDir, schemaPath)}`
    const body = text.startsWith('# yaml-language-server:') ? text.slice(text.indexOf('\n') + 1) : text
    fs.writeFileSync(path.join(toDir, f), `${pragma}\n${body}`)
  }
}
const workflows = path.join(repo, 'workflows')
// Test files (NAME.test.yaml) follow workflow-test.schema.json: tqw-dsl test checks them.
const positives = fs.readdirSync(workflows).filter((f) => f.endsWith('.yaml') && !f.endsWith('.test.yaml'))
const negatives = fs.readdirSync(path.join(here, 'negative_test')).filter((f) => f.endsWith('.yaml'))
stageTests(workflows, positives, posDir)
stageTests(path.join(here, 'negative_test'), negatives, negDir)

// Pre-checks on the schema file (cli.js: assertFileHasNoBom,
// assertFilePassesJsonLint, assertSchemaHasValidIdField,
// assertSchemaHasValidSchemaField).
const buf = fs.readFileSync(schemaPath)
if (buf[0] === 0xef && buf[1] === 0xbb && buf[2] === 0xbf) fail('the schema has a BOM')
const text = buf.toString()
let schema
try {
  schema = JSON.parse(text)
} catch (err) {
  fail(`the schema is not JSON: ${err.message}`)
  process.exit(1)
}
const dup = duplicateKey(text)
if (dup) fail(`the schema has a duplicate key ${dup}`)
if (!/^https?:\/\//.test(schema.$id ?? '')) fail(`$id ${schema.$id} does not begin with https://`)
if (schema.$schema !== 'http://json-schema.org/draft-07/schema#') fail(`$schema ${schema.$schema} is not draft-07 (2019-09 and 2020-12 count as too high)`)
if (!schema.title || !schema.description) fail('the schema has no title or description')

// Test files: no BOM, .yaml, the pragma SchemaStore expects, parseable.
function readTests(dir) {
  return fs.readdirSync(dir).map((f) => {
    const p = path.join(dir, f)
    const t = fs.readFileSync(p, 'utf-8')
    const expected = `# yaml-language-server: $schema=${path.relative(dir, schemaPath)}`
    if (t.split('\n')[0] !== expected) fail(`${p}: first line is not ${expected}`)
    if (t.charCodeAt(0) === 0xfeff) fail(`${p}: has a BOM`)
    let data
    try {
      data = YAML.parse(t)
    } catch (err) {
      fail(`${p}: not YAML: ${err.message}`)
    }
    return { p, data }
  })
}

// Ajv as cli.js's ajvFactory builds it for a draft-07 schema in full
// strict mode.
const ajv = new Ajv({ strict: true })
addFormats(ajv)
ajvFormatsDraft2019(ajv)
ajvKeywords(ajv, 'uniqueItemProperties')
for (const kw of unknownKeywords.concat([
  'allowTrailingCommas', 'defaultSnippets', 'markdownDescription', 'enumDescriptions',
  'markdownEnumDescriptions', 'x-taplo', 'x-taplo-info', 'x-intellij-language-injection',
  'x-intellij-html-description', 'x-intellij-enum-metadata',
])) {
  ajv.addKeyword(kw)
}
let validate
try {
  validate = ajv.compile(schema)
} catch (err) {
  fail(`strict Ajv does not compile the schema: ${err.message}`)
  process.exit(1)
}
let pos = 0
let neg = 0
for (const { p, data } of readTests(posDir)) {
  if (!validate(data)) fail(`${p} should be valid: ${JSON.stringify(validate.errors?.[0])}`)
  pos++
}
for (const { p, data } of readTests(negDir)) {
  if (validate(data)) fail(`${p} should be invalid`)
  neg++
}
if (pos < 13 || neg < 20) fail(`only ${pos} positive and ${neg} negative tests`)

if (failures > 0) process.exit(1)
console.log(`schemastore check: ${pos} positive and ${neg} negative tests passed; tree in ${stage}`)
if (outArg < 0) fs.rmSync(stage, { recursive: true, force: true })

// duplicateKey returns the first key that appears twice in one JSON
// object (jsonlint's allowDuplicateObjectKeys: false), or "".
function duplicateKey(src) {
  const stack = []
  let i = 0
  let expectKey = false
  while (i < src.length) {
    const c = src[i]
    if (c === '"') {
      let j = i + 1
      while (src[j] !== '"') j += src[j] === '\\' ? 2 : 1
      const str = src.slice(i, j + 1)
      if (expectKey && stack.length && stack[stack.length - 1]) {
        const keys = stack[stack.length - 1]
        if (keys.has(str)) return str
        keys.add(str)
      }
      expectKey = false
      i = j + 1
      continue
    }
    if (c === '{') { stack.push(new Set()); expectKey = true }
    else if (c === '[') stack.push(null)
    else if (c === '}' || c === ']') stack.pop()
    else if (c === ',') expectKey = stack.length > 0 && stack[stack.length - 1] !== null
    i++
  }
  return ''
}
