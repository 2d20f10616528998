// Preloaded into the cache-tests client by bench/cache-tests: Node's
// fetch ignores HTTP_PROXY, so every request goes through undici's
// ProxyAgent (the suite's own undici, from CACHE_TESTS_DIR/node_modules)
// to the forward proxy at CACHE_TESTS_PROXY. The tests that look at
// interim (1xx) responses make an undici Agent of their own; its class is
// replaced before the suite imports undici, so they use the proxy too.
import { pathToFileURL } from 'node:url'
import { join } from 'node:path'
import { createRequire } from 'node:module'

const dir = process.env.CACHE_TESTS_DIR
const proxy = process.env.CACHE_TESTS_PROXY
const require = createRequire(pathToFileURL(join(dir, 'package.json')))
const undici = require('undici')
const { ProxyAgent } = undici
class ProxiedAgent extends ProxyAgent {
  constructor (opts = {}) {
    super({ ...opts, uri: proxy })
  }
}
undici.Agent = ProxiedAgent
undici.setGlobalDispatcher(new ProxyAgent(proxy))
globalThis.fetch = undici.fetch
