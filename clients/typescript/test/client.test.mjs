// The client with the platform's CSPRNG: reports parse, the ledger holds, the state round-trips.
import assert from "node:assert/strict";
import { test } from "node:test";

import { CryptoWords, LdpClient, LedgerRefusal, oueThreshold, slotOf, topicName } from "../dist/index.js";

test("CSPRNG words look uniform", () => {
  const words = new CryptoWords();
  const n = 200000;
  let below = 0;
  for (let i = 0; i < n; i++) if (words.nextWord() < 2147483648) below++;
  assert.ok(Math.abs(below / n - 0.5) < 0.01, String(below / n));
});

test("OUE keeps the true bit with 1/2 and the others with T/2^32", () => {
  const client = new LdpClient({ protocol: "lbu", user: "u", d: 8, w: 1, E: 1 });
  const ones = new Array(8).fill(0);
  const n = 20000;
  for (let s = 0; s < n; s++) {
    const r = JSON.parse(client.reportText(s, 2));
    const byte = parseInt(r.bits, 16);
    for (let j = 0; j < 8; j++) ones[j] += (byte >> j) & 1;
  }
  const q = oueThreshold(1) / 2 ** 32;
  for (let j = 0; j < 8; j++) {
    const p = j === 2 ? 0.5 : q;
    assert.ok(Math.abs(ones[j] / n - p) < 5 * Math.sqrt((p * (1 - p)) / n), `bit ${j}: ${ones[j] / n}`);
  }
});

test("a report per slot, refusals, and the kept state", () => {
  const client = new LdpClient({ protocol: "plbu", user: "alice", d: 4, w: 2, E: 1 });
  const r = JSON.parse(new TextDecoder().decode(client.report(7, 3)));
  assert.equal(r.user, "alice");
  assert.equal(r.slot, 7);
  assert.equal(r.eps, 0.5);
  assert.equal(client.report(8, null), null);
  assert.throws(() => client.report(7, 1), (e) => e instanceof LedgerRefusal && e.code === "not_after_last");
  const kept = JSON.parse(JSON.stringify(client.state()));
  const again = new LdpClient({ protocol: "plbu", user: "alice", d: 4, w: 2, E: 0.5 }, { state: kept });
  assert.throws(() => again.report(8, 1), (e) => e instanceof LedgerRefusal && e.code === "over_budget");
  assert.notEqual(again.report(9, 1), null);
  assert.throws(() => new LdpClient({ protocol: "plbu", user: "bob", d: 4, w: 2, E: 1 }, { state: kept }), LedgerRefusal);
  assert.throws(() => client.report(9, 4), RangeError);
  assert.throws(() => client.report(-1, 0), RangeError);
});

test("slots and the topic", () => {
  assert.equal(slotOf(1_000_999, 1_000_000, 500), 1);
  assert.equal(topicName("pwevent"), "pwevent.ldp-reports");
});
