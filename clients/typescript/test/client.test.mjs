// The client with the platform's CSPRNG: reports parse, the ledger holds, the state round-trips.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CryptoWords,
  Decision,
  decisionText,
  dissimilarityBudget,
  LdpClient,
  LedgerRefusal,
  oueThreshold,
  parseDecision,
  slotOf,
  topicName,
  virtualSlot,
} from "../dist/index.js";

const decode = (bytes) => (bytes === null ? null : JSON.parse(new TextDecoder().decode(bytes)));

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

test("two rounds: round 1 at the first slot, then only where the previous decision asks it", () => {
  const client = new LdpClient({ protocol: "lbd", user: "olivia", d: 5, w: 4, E: 2, start: 10 });
  const e1 = dissimilarityBudget(4, 2);
  assert.equal(client.eps, e1);
  assert.equal(client.due(9), false);
  assert.equal(client.report(9, 1), null); // before the stream's first slot
  const first = decode(client.report(10, 1)); // the first slot needs no decision
  assert.deepEqual(Object.keys(first), ["v", "protocol", "user", "slot", "round", "eps", "E", "w", "d", "oracle", "bits", "client"]);
  assert.equal(first.round, 1);
  assert.equal(first.eps, 0.25);
  const d10 = new Decision("app", "lbd", 10, 0.5, e1);
  const second = decode(client.answer(d10, 1));
  assert.equal(second.round, 2);
  assert.equal(second.slot, 10);
  assert.equal(second.eps, 0.5);
  assert.equal(client.report(11, 3), null); // the decision of slot 10 missed: no round 1
  assert.equal(client.answer(new Decision("app", "lbd", 11, 0, e1), 3), null); // no publication
  assert.equal(decode(client.report(12, 3, new Decision("app", "lbd", 11, 0, e1))).round, 1);
  assert.equal(client.report(13, 3, new Decision("app", "lbd", 12, 0.25, 0)), null); // next: none
  assert.deepEqual(client.ledger.dump(), [
    [virtualSlot(10, 1), e1],
    [virtualSlot(10, 2), 0.5],
    [virtualSlot(12, 1), e1],
  ]);
  assert.equal(client.ledger.w, 8);
});

test("two rounds: decisions that do not fit are argument errors", () => {
  const client = new LdpClient({ protocol: "lba", user: "peggy", d: 4, w: 2, E: 1 });
  client.report(0, 1);
  assert.throws(() => client.report(1, 1, new Decision("app", "lbd", 0, 0, 0.25)), RangeError); // other protocol
  assert.throws(() => client.report(1, 1, new Decision("app", "lba", 1, 0, 0.25)), RangeError); // not slot - 1
  assert.throws(() => client.report(1, 1, new Decision("app", "lba", 0, 0, 0.5)), RangeError); // next != E/(2w)
  assert.throws(() => client.report(1, 1, { stream: "app", protocol: "lba", slot: 0, eps: 0, next: 0.25 }), TypeError);
  assert.throws(() => client.answer(new Decision("app", "lba", 0, 0.75, 0.25), 1), RangeError); // over E/2
  assert.throws(() => client.answer(new Decision("app", "lba", 0, 0.25, 0.25), 4), RangeError); // bad value
  assert.throws(() => client.answer(null, 1), TypeError);
  assert.equal(client.answer(new Decision("app", "lba", 0, 0.75, 0.25), null), null); // no value: nothing
  assert.deepEqual(client.ledger.dump(), [[0, 0.25]]);
  const lbu = new LdpClient({ protocol: "lbu", user: "u", d: 4, w: 2, E: 1 });
  assert.throws(() => lbu.report(0, 1, new Decision("app", "lbd", 0, 0, 0.25)), TypeError);
  assert.throws(() => lbu.answer(new Decision("app", "lbd", 0, 0.25, 0.25), 1), TypeError);
  assert.deepEqual(lbu.ledger.dump(), []);
});

test("two rounds: forged decisions cannot make the client overspend", () => {
  // Every decision asks the most a decision may (E/2) at every slot: the ledger over 2w virtual
  // slots refuses what would spend over E, and a refusal spends nothing.
  const w = 2;
  const E = 1;
  const client = new LdpClient({ protocol: "lbd", user: "mallory", d: 4, w, E });
  const next = dissimilarityBudget(w, E);
  const sent = [];
  const refused = [];
  let previous = null;
  for (let slot = 0; slot < 12; slot++) {
    for (const [round, run] of [
      [1, () => client.report(slot, 2, previous)],
      [2, () => client.answer(new Decision("app", "lbd", slot, E / 2, next), 2)],
    ]) {
      try {
        if (run() !== null) sent.push([virtualSlot(slot, round), round === 1 ? next : E / 2]);
      } catch (e) {
        assert.ok(e instanceof LedgerRefusal && e.code === "over_budget", String(e));
        refused.push(virtualSlot(slot, round));
      }
    }
    previous = new Decision("app", "lbd", slot, E / 2, next);
  }
  assert.ok(refused.length > 0);
  for (const [at] of sent) {
    const spent = sent.filter(([s]) => at - 2 * w < s && s <= at).reduce((a, [, e]) => a + e, 0);
    assert.ok(spent <= E * 1.000000001, `window ending at ${at} spent ${spent}`);
  }
  assert.throws(
    () => client.answer(new Decision("app", "lbd", 12, 0.6, next), 1),
    (e) => e instanceof RangeError && !(e instanceof LedgerRefusal),
  ); // over E/2: not even asked of the ledger
});

test("two rounds: the kept state holds virtual slots", () => {
  const config = { protocol: "lba", user: "zoe", d: 3, w: 2, E: 1 };
  const client = new LdpClient(config);
  client.report(0, 0);
  client.answer(new Decision("app", "lba", 0, 0.5, 0.25), 0);
  const kept = JSON.parse(JSON.stringify(client.state()));
  assert.deepEqual(kept.spends, [[0, 0.25], [1, 0.5]]);
  const again = new LdpClient(config, { state: kept });
  assert.throws(
    () => again.answer(new Decision("app", "lba", 1, 0.5, 0.25), 0),
    (e) => e instanceof LedgerRefusal && e.code === "over_budget",
  );
  assert.notEqual(again.report(1, 0, new Decision("app", "lba", 0, 0.5, 0.25)), null);
});

test("decisions: written and read strictly", () => {
  const d = new Decision("zoë", "lbd", 7, 0.025, 0.05);
  const text = decisionText(d);
  assert.equal(text, '{"v":1,"stream":"zoë","protocol":"lbd","slot":7,"eps":0.025,"next":0.05}');
  assert.deepEqual(parseDecision(text), d);
  assert.ok(Object.isFrozen(d));
  for (const bad of [
    text.replace('"slot":7', '"slot":7.0'),
    text.replace('"slot":7', '"slot":7e0'),
    text.replace('"v":1', '"v":1.0'),
    text.replace('"next":0.05', '"next":NaN'),
    text.replace('"next":0.05', '"next":0.05,"extra":1'),
    text.replace('"stream":"zoë"', '"stream":"\\ud800"'),
  ]) {
    assert.throws(() => parseDecision(bad), bad);
  }
  assert.throws(() => parseDecision(Uint8Array.of(0x7b, 0xff, 0x7d)), TypeError); // not UTF-8
  assert.throws(() => new Decision("app", "lbu", 1, 0, 0), RangeError);
  assert.throws(() => new Decision("app", "lbd", 1, 500.5, 0), RangeError);
  assert.throws(() => new Decision("app", "lbd", 1, 0, -1), RangeError);
});

test("two rounds: a slot whose virtual slot has no exact double is refused", () => {
  const client = new LdpClient({ protocol: "lbd", user: "u", d: 2, w: 1, E: 1, start: 2 ** 52 - 1 });
  assert.notEqual(client.report(2 ** 52 - 1, 0), null); // virtual slot 2^53 - 2
  assert.notEqual(client.answer(new Decision("app", "lbd", 2 ** 52 - 1, 0.5, 0.5), 0), null); // 2^53 - 1
  assert.throws(() => client.report(2 ** 52, 0, new Decision("app", "lbd", 2 ** 52 - 1, 0.5, 0.5)), RangeError);
});
