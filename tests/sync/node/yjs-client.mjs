// A real Yjs editor under Node: yjs + y-websocket's WebsocketProvider, as an application uses
// them. The Airlane Yjs tests (tests/sync/yjs) run it as a subprocess.
//
//   node yjs-client.mjs '{"url": "ws://127.0.0.1:PORT/v1/yjs", "room": "r", "name": "alice",
//                         "text": ["alpha"], "map": {"a": 1},
//                         "expectText": ["bravo"], "expectMap": ["b"], "expectPeers": ["bob"],
//                         "timeoutMs": 15000, "repeat": 1}'
//
// It connects, waits until synced, appends each "text" piece to the Y.Text "text" (one
// transaction, so one update message, each; "repeat" times over: a large piece without a large
// command line) and sets each "map" entry on the Y.Map "map", then
// waits until every "expectText" substring is in the text, every "expectMap" key is in the map
// and every "expectPeers" name has been among the awareness states (state.user.name), and
// prints the document as one JSON line: {"name", "clientID", "text", "map", "peers",
// "seenPeers"}. It then leaves cleanly: the socket closes after everything it sent, so the
// server has applied its edits.
//
// Exit status: 0 done; 2 timed out (the JSON line then has "error" and what it saw);
// 3 the server closed the connection for good (4400-4499; "error" has the code and reason).

import WebSocket from 'ws'
import * as Y from 'yjs'
import { WebsocketProvider } from 'y-websocket'

const options = JSON.parse(process.argv[2] ?? '{}')
const {
  url,
  room,
  name = 'node',
  text = [],
  map = {},
  expectText = [],
  expectMap = [],
  expectPeers = [],
  timeoutMs = 15000,
  params = {},
  repeat = 1
} = options

const doc = new Y.Doc()
const ytext = doc.getText('text')
const ymap = doc.getMap('map')
const provider = new WebsocketProvider(url, room, doc, {
  WebSocketPolyfill: WebSocket,
  params,
  disableBc: true, // only the server may carry changes between clients in these tests
  maxBackoffTime: 500
})
provider.awareness.setLocalStateField('user', { name })

let lastClose = null
let finished = false

const peers = () =>
  [...provider.awareness.getStates().values()]
    .map((state) => state?.user?.name)
    .filter((peer) => typeof peer === 'string')
    .sort()

// Presence is momentary (a peer that is done leaves, and its state goes with it), so the
// expectation is on the names seen at any time.
const seenPeers = new Set()

const snapshot = () => ({
  name,
  clientID: doc.clientID,
  text: ytext.toString(),
  map: ymap.toJSON(),
  peers: peers(),
  seenPeers: [...seenPeers].sort()
})

const satisfied = () =>
  provider.synced &&
  expectText.every((piece) => ytext.toString().includes(piece)) &&
  expectMap.every((key) => ymap.has(key)) &&
  expectPeers.every((peer) => seenPeers.has(peer))

const finish = (status, extra = {}) => {
  if (finished) return
  finished = true
  clearTimeout(timer)
  process.stdout.write(JSON.stringify({ ...snapshot(), ...extra }) + '\n')
  process.exitCode = status
  // Leave cleanly: destroy closes the socket after what was sent; the process then exits
  // when nothing is pending. The unref'd timer is a backstop.
  provider.destroy()
  provider.awareness.destroy()
  doc.destroy()
  setTimeout(() => process.exit(status), 3000).unref()
}

// Checked on every change, but never from inside one (the edits below are several updates,
// and a listener must not destroy the document under them): the check runs a turn later.
let checkPending = false
const check = () => {
  if (checkPending || finished) return
  checkPending = true
  setTimeout(() => {
    checkPending = false
    if (!finished && satisfied()) finish(0)
  }, 0)
}

const timer = setTimeout(
  () => finish(2, { error: 'timeout', synced: provider.synced, lastClose }),
  timeoutMs
)

provider.on('connection-close', (event) => {
  if (event) lastClose = { code: event.code, reason: event.reason }
})
provider.on('closed', (event) => finish(3, { error: 'closed', code: event.code, reason: event.reason }))

let edited = false
provider.on('sync', (synced) => {
  if (synced && !edited) {
    edited = true
    for (const piece of text) {
      ytext.insert(ytext.length, piece.repeat(repeat))
    }
    for (const [key, value] of Object.entries(map)) {
      ymap.set(key, value)
    }
  }
  check()
})
doc.on('update', check)
provider.awareness.on('change', () => {
  for (const peer of peers()) seenPeers.add(peer)
  check()
})
