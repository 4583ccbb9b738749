// An MQTT.js (npm "mqtt") client of a broker, for the MQTT bridge interop tests
// (tests/mqtt/test_node_mqtt.py): MQTT 5, a client nobody here wrote.
//
//   node mqtt-client.mjs --url mqtt://127.0.0.1:1883 --publish airlane/logs/sensors \
//       --count 20 --qos 1,2
//   node mqtt-client.mjs --url mqtt://127.0.0.1:1883 --subscribe results/x --expect 4
//   node mqtt-client.mjs --url mqtt://127.0.0.1:1883 --subscribe 'advice/#' --expect-done 2 \
//       --publish sensor/node-1/temp --count 3 --qos 1
//
// It prints one JSON line per thing that happens, on stdout:
//   {"event":"connected"}
//   {"event":"subscribed","granted":[{"topic":...,"qos":...}]}  (then the test may publish)
//   {"event":"published","i":0,"qos":1}                          (each acknowledged publish)
//   {"event":"message","topic":...,"qos":...,"payload":...,"contentType":...,"userProperties":...}
//   {"event":"done","received":N}
// --publish sends --count sensor readings ({"sensor": ..., "i": i, "temp": ...}), one at a
// time, each awaited to its PUBACK (QoS 1) or PUBCOMP (QoS 2), the QoS cycling through --qos.
// --subscribe waits for --expect messages on the topic, or, with --expect-done, for that many
// messages whose JSON payload is an event of kind "done" (the end of a generation). It exits 0 when all is done, 1 on an
// error or when --timeout-ms passes first (every wait is bounded).

import { parseArgs } from "node:util";

import mqtt from "mqtt";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    "client-id": { type: "string", default: `mqttjs-${process.pid}` },
    publish: { type: "string" },
    count: { type: "string", default: "10" },
    qos: { type: "string", default: "1,2" },
    sensor: { type: "string", default: "node-1" },
    subscribe: { type: "string" },
    expect: { type: "string", default: "1" },
    "expect-done": { type: "string" },
    "timeout-ms": { type: "string", default: "15000" },
  },
});

function say(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

function fail(error) {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
}

const deadline = setTimeout(
  () => fail(new Error(`timed out after ${args["timeout-ms"]} ms`)),
  Number(args["timeout-ms"]),
);

async function main() {
  if (!args.url) throw new Error("--url is required");
  const client = await mqtt.connectAsync(args.url, {
    protocolVersion: 5,
    clientId: args["client-id"],
    clean: true,
    reconnectPeriod: 0,
    connectTimeout: 5000,
  });
  say({ event: "connected" });

  let received = 0;
  let done = 0;
  let allReceived = Promise.resolve();
  if (args.subscribe) {
    const expect = Number(args.expect);
    allReceived = new Promise((resolve) => {
      client.on("message", (topic, payload, packet) => {
        const text = payload.toString("utf8");
        let body;
        try {
          body = JSON.parse(text);
        } catch {
          body = text;
        }
        const props = packet.properties ?? {};
        say({
          event: "message",
          topic,
          qos: packet.qos,
          payload: body,
          contentType: props.contentType ?? null,
          userProperties: props.userProperties ?? null,
        });
        received += 1;
        if (body && body.kind === "done") done += 1;
        if (args["expect-done"] ? done >= Number(args["expect-done"]) : received >= expect) {
          resolve();
        }
      });
    });
    const granted = await client.subscribeAsync(args.subscribe, { qos: 1 });
    say({ event: "subscribed", granted: granted.map((g) => ({ topic: g.topic, qos: g.qos })) });
  }

  if (args.publish) {
    const levels = args.qos.split(",").map(Number);
    const count = Number(args.count);
    for (let i = 0; i < count; i += 1) {
      const qos = levels[i % levels.length];
      const reading = { sensor: args.sensor, i, temp: 20 + i / 10 };
      await client.publishAsync(args.publish, JSON.stringify(reading), {
        qos,
        properties: { contentType: "application/json", userProperties: { sensor: args.sensor } },
      });
      say({ event: "published", i, qos });
    }
  }

  await allReceived;
  await client.endAsync();
  say({ event: "done", received });
  clearTimeout(deadline);
}

main().catch(fail);
