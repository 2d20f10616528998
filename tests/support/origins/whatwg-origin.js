// An origin that routes as Node applications do: by the WHATWG URL parser
// (`new URL(req.url, base)`), which reads `\` as `/` and removes
// dot-segments, `%2e` included. Serves robots.txt, a secret under
// /private/ and a page elsewhere; GET /__hits answers how many requests
// it served under /private/. Prints its port on the first line.
const http = require("http");
const robots = process.argv[2] || "User-agent: *\nDisallow: /private\n";
let hits = 0;
const server = http.createServer((req, res) => {
  const path = new URL(req.url, "http://origin.test").pathname;
  let body = "page";
  if (path === "/__hits") {
    body = String(hits);
  } else if (path === "/robots.txt") {
    body = robots;
  } else if (path.startsWith("/private")) {
    hits += 1;
    body = "SECRET " + path;
  }
  res.writeHead(200, { "Content-Type": "text/plain", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(server.address().port + "\n");
});
