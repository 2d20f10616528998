// Summarises a cache-tests results file (the client's JSON) the way
// cache-tests.fyi counts it: node cache-tests-summary.mjs SUITE_DIR RESULTS.
// Prints the counts per result type, then every required test that
// failed (with the suite's reason) and every optional one.
import { readFileSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import { join } from 'node:path'

const [dir, file] = process.argv.slice(2)
const tests = (await import(pathToFileURL(join(dir, 'tests/index.mjs')))).default
const { determineTestResult, resultTypes } = await import(
  pathToFileURL(join(dir, 'test-engine/lib/results.mjs')))
const results = JSON.parse(readFileSync(file, 'utf8'))
const names = Object.fromEntries(Object.entries(resultTypes).map(([k, v]) => [v[2], k]))
const counts = {}
const lines = []
for (const suite of tests) {
  for (const test of suite.tests) {
    if (test.browser_only) continue
    const type = names[determineTestResult(tests, test.id, results)[2]]
    counts[type] = (counts[type] || 0) + 1
    if (type !== 'pass' && type !== 'yes' && type !== 'no' && type !== 'untested') {
      const detail = results[test.id] === undefined ? '' : JSON.stringify(results[test.id])
      lines.push(`${type.padEnd(16)} ${test.kind || 'required'} ${test.id}: ${detail.slice(0, 160)}`)
    }
  }
}
console.log(Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(', '))
for (const l of lines.sort()) console.log(l)
