// The client with the platform's CSPRNG: reports parse, the ledger holds, the state round-trips.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import {
  checkConfig,
  CLIENT_NAME,
  CounterWords,
  CryptoWords,
  Decision,
  decisionText,
  dissimilarityBudget,
  grrKeepThreshold,
  inInterval,
  inRound1,
  intervalOf,
  LdpClient,
  LedgerRefusal,
  levelCells,
  nodeOf,
  oracleCells,
  oueThreshold,
  parseDecision,
  phase,
  position,
  POSITIONS,
  rangeQueries,
  slotOf,
  topicName,
  treeHeight,
  treeLevel,
  virtualSlot,
  WIRE_VERSION,
} from "../dist/index.js";

const decode = (bytes) => (bytes === null ? null : JSON.parse(new TextDecoder().decode(bytes)));

// An OUE report's n bits from its hex (bit j is bit j mod 8 of byte j/8), checking the length
// (ceil(n/8) bytes) and that the last byte's unused high bits are zero.
function unpackBits(hex, n) {
  assert.equal(hex.length, 2 * Math.ceil(n / 8), `${n} bits take ${Math.ceil(n / 8)} bytes: ${hex}`);
  assert.match(hex, /^[0-9a-f]*$/);
  const bytes = [];
  for (let i = 0; i < hex.length; i += 2) bytes.push(parseInt(hex.slice(i, i + 2), 16));
  const bits = [];
  for (let j = 0; j < n; j++) bits.push((bytes[j >> 3] >> (j & 7)) & 1);
  if (n % 8 !== 0) assert.equal(bytes[bytes.length - 1] >> n % 8, 0, `unused high bits set: ${hex}`);
  return bits;
}

test("version 2: d value cells and a no-value cell, d in [1, 65535]", () => {
  assert.equal(WIRE_VERSION, 2);
  assert.equal(CLIENT_NAME, "pwevent-ldp-ts/0.3.0");
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf-8"));
  assert.equal(CLIENT_NAME, `pwevent-ldp-ts/${pkg.version}`);
  assert.equal(oracleCells(8), 9);
  const top = new LdpClient({ protocol: "lbu", user: "u", d: 65535, w: 1, E: 1 });
  assert.equal(top.cells, 65536);
  const r = decode(top.report(0, null));
  assert.equal(r.v, 2);
  assert.equal(r.d, 65535);
  assert.equal(r.client, CLIENT_NAME);
  assert.equal(unpackBits(r.bits, 65536).length, 65536);
  assert.throws(() => new LdpClient({ protocol: "lbu", user: "u", d: 65536, w: 1, E: 1 }), RangeError);
  assert.throws(() => new LdpClient({ protocol: "lbu", user: "u", d: 0, w: 1, E: 1 }), RangeError);
});

test("CSPRNG words look uniform", () => {
  const words = new CryptoWords();
  const n = 200000;
  let below = 0;
  for (let i = 0; i < n; i++) if (words.nextWord() < 2147483648) below++;
  assert.ok(Math.abs(below / n - 0.5) < 0.01, String(below / n));
});

test("OUE over d + 1 cells keeps the true bit (the value's, or d's for no value) with 1/2 and the others with T/2^32", () => {
  const d = 8;
  const client = new LdpClient({ protocol: "lbu", user: "u", d, w: 1, E: 1 });
  assert.equal(client.oracle, "oue");
  const q = oueThreshold(1) / 2 ** 32;
  const n = 20000;
  let slot = 0;
  for (const [value, cell] of [[2, 2], [null, d], [undefined, d]]) {
    const ones = new Array(d + 1).fill(0);
    for (let i = 0; i < n; i++) {
      const r = JSON.parse(client.reportText(slot++, value));
      assert.equal(r.d, d);
      const bits = unpackBits(r.bits, d + 1);
      for (let j = 0; j <= d; j++) ones[j] += bits[j];
    }
    for (let j = 0; j <= d; j++) {
      const p = j === cell ? 0.5 : q;
      assert.ok(Math.abs(ones[j] / n - p) < 5 * Math.sqrt((p * (1 - p)) / n), `value ${value} bit ${j}: ${ones[j] / n}`);
    }
  }
});

test("GRR over d + 1 cells: no value is cell d, kept with p, else moved uniformly", () => {
  const d = 3;
  const client = new LdpClient({ protocol: "plbu", user: "u", d, w: 1, E: 2 });
  assert.equal(client.oracle, "grr");
  assert.equal(client.cells, d + 1);
  const p = grrKeepThreshold(2, d + 1) / 2 ** 32;
  const n = 20000;
  let slot = 0;
  for (const [value, cell] of [[1, 1], [null, d]]) {
    const counts = new Array(d + 1).fill(0);
    for (let i = 0; i < n; i++) {
      const r = decode(client.report(slot++, value));
      assert.equal(r.oracle, "grr");
      assert.ok(Number.isInteger(r.cell) && r.cell >= 0 && r.cell <= d, String(r.cell));
      counts[r.cell]++;
    }
    for (let j = 0; j <= d; j++) {
      const pj = j === cell ? p : (1 - p) / d;
      assert.ok(Math.abs(counts[j] / n - pj) < 5 * Math.sqrt((pj * (1 - pj)) / n), `value ${value} cell ${j}: ${counts[j] / n}`);
    }
  }
});

test("no value: a due slot sends a report that spends what a value's report spends", () => {
  // Two users alike but that one never has a value: both send at every due slot, the same
  // keys, the same budget, the same bytes' length (OUE) and the same ledger; a refusal alike.
  for (const config of [
    { protocol: "lbu", user: "u", d: 8, w: 3, E: 1.5 },
    { protocol: "lsp", user: "u", d: 5, w: 3, E: 1, start: 2 },
    { protocol: "lpu", user: "u", d: 6, w: 4, E: 1, lpuKey: "stream-key" },
    { protocol: "plbu", user: "u", d: 3, w: 2, E: 4 },
    { protocol: "plbu", user: "u", d: 12, w: 10, E: 1 },
  ]) {
    const valued = new LdpClient(config, { words: new CounterWords("a") });
    const blank = new LdpClient(config, { words: new CounterWords("b") });
    let sent = 0;
    for (let slot = 0; slot < 20; slot++) {
      const where = `${config.protocol} d ${config.d} slot ${slot}`;
      const a = valued.report(slot, slot % config.d);
      const b = blank.report(slot, null);
      assert.equal(a === null, !valued.due(slot), where);
      assert.equal(b === null, !blank.due(slot), where);
      if (a === null) continue;
      sent++;
      const [ra, rb] = [decode(a), decode(b)];
      assert.deepEqual(Object.keys(rb), Object.keys(ra), where);
      for (const key of ["v", "protocol", "slot", "eps", "E", "w", "d", "oracle", "client"]) {
        assert.equal(rb[key], ra[key], `${where}: ${key}`);
      }
      if (ra.oracle === "oue") {
        assert.equal(b.length, a.length, where);
        assert.equal(unpackBits(rb.bits, config.d + 1).length, config.d + 1, where);
        assert.equal(unpackBits(ra.bits, config.d + 1).length, config.d + 1, where);
      } else {
        assert.ok(rb.cell >= 0 && rb.cell <= config.d, where);
      }
      assert.deepEqual(blank.ledger.dump(), valued.ledger.dump(), where);
    }
    assert.ok(sent > 0, config.protocol);
    // at the same slot again: refused alike, nothing spent
    const last = valued.ledger.last;
    for (const [client, value] of [[valued, 0], [blank, null]]) {
      assert.throws(() => client.report(last, value), (e) => e instanceof LedgerRefusal && e.code === "not_after_last");
    }
    assert.deepEqual(blank.ledger.dump(), valued.ledger.dump());
  }
  // over budget: a no-value report is refused as a value's is, and spends nothing
  const kept = { protocol: "lbu", user: "u", w: 2, E: 1, spends: [[0, 1]] };
  for (const value of [1, null]) {
    const client = new LdpClient({ protocol: "lbu", user: "u", d: 4, w: 2, E: 1 }, { state: kept });
    assert.throws(() => client.report(1, value), (e) => e instanceof LedgerRefusal && e.code === "over_budget");
    assert.deepEqual(client.ledger.dump(), [[0, 1]]);
    assert.notEqual(client.report(2, value), null);
  }
});

test("a report per slot, refusals, and the kept state", () => {
  const client = new LdpClient({ protocol: "plbu", user: "alice", d: 4, w: 2, E: 1 });
  const r = JSON.parse(new TextDecoder().decode(client.report(7, 3)));
  assert.equal(r.v, 2);
  assert.equal(r.user, "alice");
  assert.equal(r.slot, 7);
  assert.equal(r.eps, 0.5);
  assert.equal(r.d, 4);
  assert.equal(r.oracle, "grr"); // over d + 1 = 5 cells at eps 0.5
  const none = decode(client.report(8, null)); // no value: still a report, of cell d
  assert.equal(none.slot, 8);
  assert.equal(none.eps, 0.5);
  assert.equal(none.d, 4);
  assert.ok(Number.isInteger(none.cell) && none.cell >= 0 && none.cell <= 4, String(none.cell));
  assert.deepEqual(client.ledger.dump(), [[7, 0.5], [8, 0.5]]);
  assert.throws(() => client.report(8, 1), (e) => e instanceof LedgerRefusal && e.code === "not_after_last");
  assert.throws(() => client.report(7, null), (e) => e instanceof LedgerRefusal && e.code === "not_after_last");
  const kept = JSON.parse(JSON.stringify(client.state()));
  const again = new LdpClient({ protocol: "plbu", user: "alice", d: 4, w: 2, E: 0.5 }, { state: kept });
  assert.throws(() => again.report(9, 1), (e) => e instanceof LedgerRefusal && e.code === "over_budget");
  assert.throws(() => again.report(9, null), (e) => e instanceof LedgerRefusal && e.code === "over_budget");
  assert.notEqual(again.report(10, 1), null);
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
  assert.equal(client.report(9, null), null); // not due: nothing, with or without a value
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
  assert.equal(client.report(11, null), null); // nor without a value
  assert.equal(client.answer(new Decision("app", "lbd", 11, 0, e1), 3), null); // no publication
  assert.equal(client.answer(new Decision("app", "lbd", 11, 0, e1), null), null);
  assert.equal(decode(client.report(12, 3, new Decision("app", "lbd", 11, 0, e1))).round, 1);
  assert.equal(client.report(13, 3, new Decision("app", "lbd", 12, 0.25, 0)), null); // next: none
  assert.equal(client.report(13, null, new Decision("app", "lbd", 12, 0.25, 0)), null);
  assert.deepEqual(client.ledger.dump(), [
    [virtualSlot(10, 1), e1],
    [virtualSlot(10, 2), 0.5],
    [virtualSlot(12, 1), e1],
  ]);
  // no value, asked both rounds: both sent, of cell d (d + 1 = 6 bits), at the rounds' budgets
  const blank1 = decode(client.report(14, null, new Decision("app", "lbd", 13, 0, e1)));
  assert.equal(blank1.round, 1);
  assert.equal(blank1.eps, e1);
  assert.equal(blank1.d, 5);
  assert.equal(unpackBits(blank1.bits, 6).length, 6);
  const blank2 = decode(client.answer(new Decision("app", "lbd", 14, 0.5, e1), null));
  assert.equal(blank2.round, 2);
  assert.equal(blank2.slot, 14);
  assert.equal(blank2.eps, 0.5);
  assert.equal(unpackBits(blank2.bits, 6).length, 6);
  assert.deepEqual(client.ledger.dump(), [
    [virtualSlot(12, 1), e1], // slot 10's rounds are past the window of 2w = 8 virtual slots
    [virtualSlot(14, 1), e1],
    [virtualSlot(14, 2), 0.5],
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
  assert.throws(() => client.answer(new Decision("app", "lba", 0, 0.75, 0.25), null), RangeError); // over E/2
  assert.throws(() => client.answer(new Decision("app", "lbd", 0, 0.25, 0.25), null), RangeError); // other protocol
  assert.throws(() => client.report(1, null, new Decision("app", "lba", 0, 0, 0.5)), RangeError); // next != E/(2w)
  assert.deepEqual(client.ledger.dump(), [[0, 0.25]]);
  assert.equal(client.answer(new Decision("app", "lba", 0, 0, 0.25), null), null); // eps 0: not asked
  const blank = decode(client.answer(new Decision("app", "lba", 0, 0.25, 0.25), null)); // no value: cell d
  assert.equal(blank.round, 2);
  assert.equal(blank.eps, 0.25);
  assert.equal(unpackBits(blank.bits, 5).length, 5);
  assert.deepEqual(client.ledger.dump(), [[0, 0.25], [1, 0.25]]);
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

// LPD and LPA: population division by public positions (population.ts).
const HALF = 2 ** 31;

/** The first user `<prefix>-<i>` whose position under `key` lies in the upper half (or the lower). */
function populationUser(key, prefix, upper) {
  for (let i = 0; i < 10000; i++) {
    const user = `${prefix}-${i}`;
    const at = position(key, user);
    if (at >= HALF === upper) return { user, at };
  }
  throw new Error("no such user");
}

test("population: positions are HMAC-SHA256's first 4 bytes, phases exact", () => {
  for (const [key, user] of [["k", "u"], ["pop-key", "zoë 🚀"], ["x".repeat(100), "u".repeat(256)]]) {
    const data = Buffer.from(user, "utf-8");
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    const tag = createHmac("sha256", Buffer.from(key, "utf-8"))
      .update(Buffer.from("pwevent-lpd-v1", "ascii"))
      .update(length)
      .update(data)
      .digest();
    assert.equal(position(key, user), tag.readUInt32BE(0), `${key} ${user}`);
  }
  assert.equal(POSITIONS, 2 ** 32);
  assert.equal(HALF, 2 ** 31);
  // floor(at w / 2^31) exactly, where at w exceeds 2^53
  assert.equal(phase(HALF - 1, 2 ** 31 - 1), 2 ** 31 - 2);
  assert.equal(phase(HALF - 2, 2 ** 31 - 1), 2 ** 31 - 3);
  assert.equal(phase(1, 2 ** 31 - 1), 0);
  assert.equal(phase(0, 7), 0);
  assert.equal(phase(HALF, 7), null);
  assert.equal(phase(2 ** 32 - 1, 7), null);
  assert.throws(() => phase(2 ** 32, 7), RangeError);
  assert.throws(() => phase(1, 0), RangeError);
  // the interval [from, from + size) of the upper half, offsets modulo 2^31
  assert.equal(inInterval(HALF + 5, 5, 1), true);
  assert.equal(inInterval(HALF + 5, 6, 10), false);
  assert.equal(inInterval(HALF + 5, 0, 5), false);
  assert.equal(inInterval(HALF + 1, HALF - 2, 4), true); // wraps around: offsets 2^31 - 2, 2^31 - 1, 0, 1
  assert.equal(inInterval(HALF + 2, HALF - 2, 4), false);
  assert.equal(inInterval(2 ** 32 - 1, HALF - 1, 1), true);
  assert.equal(inInterval(HALF - 1, 0, HALF), false); // a dissimilarity user: never
  assert.equal(inRound1(0, 4, 5, 3), false); // before the first slot
  assert.equal(inRound1(0, 5, 5, 3), true);
});

test("population: lpd and lpa are due by phase, in round 1 only", () => {
  const key = "the-stream-key";
  for (const protocol of ["lpd", "lpa"]) {
    for (const w of [1, 3, 7]) {
      const start = 20;
      const low = populationUser(key, `low-${w}`, false);
      const high = populationUser(key, `high-${w}`, true);
      const k = Number((BigInt(low.at) * BigInt(w)) / 2n ** 31n);
      const lows = new LdpClient({ protocol, user: low.user, d: 4, w, E: 2, start, lpuKey: key });
      const highs = new LdpClient({ protocol, user: high.user, d: 4, w, E: 2, start, lpuKey: key });
      assert.equal(lows.position, low.at);
      assert.equal(highs.position, high.at);
      assert.equal(lows.eps, 2); // every report at E
      assert.equal(lows.ledger.w, w); // real slots, window w
      assert.equal(phase(low.at, w), k);
      assert.equal(phase(high.at, w), null);
      for (let slot = 0; slot < start + 4 * w + 2; slot++) {
        const due = slot >= start && (slot - start) % w === k;
        assert.equal(lows.due(slot), due, `${protocol} w ${w} slot ${slot}`);
        assert.equal(highs.due(slot), false, `${protocol} w ${w} slot ${slot}`);
      }
    }
  }
  // reports at the phase: round 1 at E, spent at the real slot; elsewhere nothing
  const w = 3;
  const start = 5;
  const low = populationUser(key, "lower", false);
  const k = start + phase(low.at, w);
  const client = new LdpClient({ protocol: "lpd", user: low.user, d: 4, w, E: 2, start, lpuKey: key });
  const asked = (slot) => new Decision("app", "lpd", slot - 1, 0, 2);
  if (k === start) assert.notEqual(client.report(k, 1), null); // the first slot needs no decision
  else assert.equal(client.report(k, 1), null); // the decision of slot k - 1 missed
  const r = decode(client.report(k + w, 1, asked(k + w)));
  assert.deepEqual(Object.keys(r), ["v", "protocol", "user", "slot", "round", "eps", "E", "w", "d", "oracle", "bits", "client"]);
  assert.equal(r.protocol, "lpd");
  assert.equal(r.round, 1);
  assert.equal(r.eps, 2);
  assert.equal(r.slot, k + w);
  assert.equal(client.report(k + w + 1, 1, asked(k + w + 1)), null); // not its phase
  assert.equal(client.report(k + 2 * w, 1, new Decision("app", "lpd", k + 2 * w - 1, 0, 0)), null); // next: none
  const blank = decode(client.report(k + 3 * w, null, asked(k + 3 * w))); // no value: cell d
  assert.equal(blank.eps, 2);
  assert.equal(unpackBits(blank.bits, 5).length, 5);
  assert.deepEqual(client.ledger.dump(), [[k + 3 * w, 2]]);
  assert.deepEqual(client.state().spends, [[k + 3 * w, 2]]); // real slots
  // a dissimilarity user never answers a publication round, even one naming the whole upper half
  assert.equal(client.answer(new Decision("app", "lpd", k + 4 * w, 2, 2, 0, HALF), 1), null);
  assert.deepEqual(client.ledger.dump(), [[k + 3 * w, 2]]);
});

test("population: a publication user answers inside the decision's interval only, wrap-around included", () => {
  const key = "pop-key";
  const w = 3;
  const E = 2;
  const { user, at } = populationUser(key, "pub", true);
  const off = at - HALF;
  assert.ok(off > 8 && off < HALF - 8, "a user away from the half's ends");
  const client = new LdpClient({ protocol: "lpa", user, d: 3, w, E, start: 0, lpuKey: key });
  const d = (slot, from, size) => new Decision("app", "lpa", slot, E, E, from, size);
  let slot = 0;
  const answer = (from, size, value = 1) => {
    const bytes = client.answer(d(slot, from, size), value);
    slot += w; // one answer per window at most: keep the next one allowed
    return decode(bytes);
  };
  const inside = answer(off, 1); // exactly its position
  assert.equal(inside.round, 2);
  assert.equal(inside.eps, E);
  assert.equal(inside.protocol, "lpa");
  assert.equal(answer(off + 1, HALF - 1), null); // every upper position but its own (wraps around)
  assert.equal(answer(0, off), null); // just below it
  assert.notEqual(answer(0, off + 1), null); // up to it
  assert.equal(answer(off + 1, 5), null); // just above it
  assert.notEqual(answer(HALF - 3, off + 4), null); // wraps around: [2^31 - 3, 2^31) and [0, off]
  assert.equal(answer(HALF - 3, off + 3), null); // wraps around, stopping just short of it
  assert.notEqual(answer(off - 2, 5, null), null); // no value: answered as cell d
  assert.notEqual(answer(0, HALF), null); // the whole upper half
  assert.equal(client.report(slot, 1), null); // never a dissimilarity user
  assert.equal(client.report(slot + 1, 1, new Decision("app", "lpa", slot, 0, E)), null);
  assert.equal(client.answer(new Decision("app", "lpa", slot, 0, E), 1), null); // no publication round
  const spends = client.ledger.dump();
  assert.deepEqual(spends, [[slot - w, E]]);
});

test("population: forged decisions (eps != E, next != E, other protocol or slot) are argument errors", () => {
  const key = "pop-key";
  const E = 2;
  const high = populationUser(key, "forge-high", true);
  const lpa = new LdpClient({ protocol: "lpa", user: high.user, d: 3, w: 2, E, lpuKey: key });
  const off = high.at - HALF;
  const notRefusal = (e) => e instanceof RangeError && !(e instanceof LedgerRefusal);
  for (const eps of [1, 0.5, 3, 500]) {
    assert.throws(() => lpa.answer(new Decision("app", "lpa", 4, eps, E, off, 1), 1), notRefusal, `eps ${eps}`);
    // even outside its interval: the budget is checked first
    assert.throws(() => lpa.answer(new Decision("app", "lpa", 4, eps, E, off + 1, 1), null), notRefusal);
  }
  assert.throws(() => lpa.answer(new Decision("app", "lpd", 4, E, E, off, 1), 1), notRefusal); // other protocol
  assert.throws(() => lpa.answer(new Decision("app", "lba", 4, E / 2, E), 1), notRefusal);
  assert.deepEqual(lpa.ledger.dump(), []);
  const low = populationUser(key, "forge-low", false);
  const w = 2;
  const lpd = new LdpClient({ protocol: "lpd", user: low.user, d: 3, w, E, lpuKey: key });
  const k = phase(low.at, w);
  const due = k + 2 * w;
  assert.equal(lpd.due(due), true);
  assert.throws(() => lpd.report(due, 1, new Decision("app", "lpd", due - 1, 0, 1)), notRefusal); // next != E
  assert.throws(() => lpd.report(due, 1, new Decision("app", "lpd", due - 1, 0, E / (2 * w))), notRefusal);
  assert.throws(() => lpd.report(due, 1, new Decision("app", "lpd", due, 0, E)), notRefusal); // not slot - 1
  assert.throws(() => lpd.report(due, 1, new Decision("app", "lpa", due - 1, 0, E)), notRefusal);
  assert.throws(() => lpd.report(due, 1, { stream: "app", protocol: "lpd", slot: due - 1, eps: 0, next: E, from: 0, size: 0 }), TypeError);
  assert.deepEqual(lpd.ledger.dump(), []);
  assert.notEqual(lpd.report(due, 1, new Decision("app", "lpd", due - 1, E, E, 0, 1)), null);
  // a slot past 2^52 - 1 is refused as for lbd and lba
  const top = new LdpClient({ protocol: "lpa", user: high.user, d: 3, w: 2, E, lpuKey: key });
  assert.notEqual(top.answer(new Decision("app", "lpa", 2 ** 52 - 1, E, E, 0, HALF), 0), null);
  assert.throws(() => top.answer(new Decision("app", "lpa", 2 ** 52, E, E, 0, HALF), 0), RangeError);
});

test("population: lpd and lpa need the stream's public key", () => {
  for (const protocol of ["lpd", "lpa"]) {
    const config = { protocol, user: "u", d: 4, w: 2, E: 1 };
    assert.throws(() => checkConfig(config), RangeError, `${protocol} without a key`);
    assert.throws(() => new LdpClient(config), RangeError);
    assert.throws(() => new LdpClient({ ...config, lpuKey: "" }), RangeError);
    assert.throws(() => new LdpClient({ ...config, lpuKey: "k".repeat(257) }), RangeError);
    assert.throws(() => new LdpClient({ ...config, lpuKey: "\ud800" }), RangeError);
    assert.throws(() => new LdpClient({ ...config, lpuKey: 7 }), TypeError);
    const ok = new LdpClient({ ...config, lpuKey: "k".repeat(256) });
    assert.equal(ok.position, position("k".repeat(256), "u"));
    assert.equal(new LdpClient({ ...config, lpuKey: "é".repeat(128) }).eps, 1);
  }
  assert.equal(new LdpClient({ protocol: "lbd", user: "u", d: 4, w: 2, E: 1 }).position, null); // lbd needs none
});

test("population: the ledger refuses a second interval naming the user within w slots", () => {
  const key = "pop-key";
  const w = 4;
  const E = 1.5;
  const { user, at } = populationUser(key, "twice", true);
  const off = at - HALF;
  const config = { protocol: "lpd", user, d: 2, w, E, start: 3, lpuKey: key };
  const client = new LdpClient(config);
  const named = (slot, from = off, size = 1) => new Decision("app", "lpd", slot, E, E, from, size);
  assert.notEqual(client.answer(named(10), 1), null);
  for (const slot of [11, 12, 13]) {
    // a forged decision naming the user again within w slots: refused, nothing spent nor drawn
    assert.throws(
      () => client.answer(named(slot, (off + HALF - 1) % HALF, 3), 0),
      (e) => e instanceof LedgerRefusal && e.code === "over_budget",
      `slot ${slot}`,
    );
  }
  assert.throws(
    () => client.answer(named(10), 1),
    (e) => e instanceof LedgerRefusal && e.code === "not_after_last",
  );
  assert.deepEqual(client.ledger.dump(), [[10, E]]);
  // the kept state holds real slots and keeps refusing
  const kept = JSON.parse(JSON.stringify(client.state()));
  assert.deepEqual(kept.spends, [[10, E]]);
  const again = new LdpClient(config, { state: kept });
  assert.throws(
    () => again.answer(named(13), 1),
    (e) => e instanceof LedgerRefusal && e.code === "over_budget",
  );
  assert.notEqual(again.answer(named(14), 1), null); // w slots on
  assert.deepEqual(again.ledger.dump(), [[14, E]]);
  assert.notEqual(client.answer(named(14), 1), null);
});

test("population: decisions carry their interval, written and read strictly", () => {
  const d = new Decision("app", "lpd", 1042, 1, 1, 0, 4096);
  assert.equal(decisionText(d), '{"v":1,"stream":"app","protocol":"lpd","slot":1042,"eps":1,"next":1,"from":0,"size":4096}');
  assert.deepEqual(parseDecision(decisionText(d)), d);
  assert.ok(Object.isFrozen(d));
  assert.equal(d.from, 0);
  assert.equal(d.size, 4096);
  const none = new Decision("app", "lpa", 3, 0, 0);
  assert.equal(decisionText(none), '{"v":1,"stream":"app","protocol":"lpa","slot":3,"eps":0,"next":0,"from":0,"size":0}');
  const lbd = new Decision("app", "lbd", 3, 0.5, 0.25);
  assert.equal(lbd.from, 0);
  assert.equal(lbd.size, 0);
  assert.equal(decisionText(lbd), '{"v":1,"stream":"app","protocol":"lbd","slot":3,"eps":0.5,"next":0.25}');
  const edge = new Decision("app", "lpa", 1, 1, 1, HALF - 1, HALF);
  assert.deepEqual(parseDecision(decisionText(edge)), edge);
  for (const [from, size, eps] of [
    [HALF, 1, 1], // from past the half
    [-1, 1, 1],
    [0.5, 1, 1],
    [0, HALF + 1, 1], // more than the half
    [0, 0, 1], // a publication budget naming nobody
    [0, 5, 0], // users named without a budget
    [0, 1.5, 1],
  ]) {
    assert.throws(() => new Decision("app", "lpd", 1, eps, 1, from, size), RangeError, `${from} ${size} ${eps}`);
  }
  assert.throws(() => new Decision("app", "lbd", 1, 0.5, 0.25, 1, 0), RangeError); // lbd: from 0
  assert.throws(() => new Decision("app", "lba", 1, 0.5, 0.25, 0, 1), RangeError); // lba: size 0
  const text = decisionText(d);
  for (const bad of [
    text.replace(',"from":0,"size":4096', ""), // lpd without its interval
    text.replace('"from":0', '"from":0.0'),
    text.replace('"size":4096', '"size":4096.0'),
    text.replace('"size":4096', '"size":4.096e3'),
    text.replace('"from":0', '"from":"0"'),
    text.replace('"from":0,"size":4096', '"size":4096,"from":0'),
    text.replace('"size":4096', '"size":4096,"extra":1'),
    decisionText(lbd).replace("}", ',"from":0,"size":0}'), // lbd with an interval
  ]) {
    assert.throws(() => parseDecision(bad), (e) => !(e instanceof LedgerRefusal), bad);
  }
  assert.equal(parseDecision(text.replace('"from":0', '"from":-0')).from, 0);
});

// MTSP: two rounds a slot over a tree (tree.ts).

/** The first user `<prefix>-<i>` whose level of a tree of height `h` under `key` is `level`. */
function treeUser(key, prefix, h, level) {
  for (let i = 0; i < 10000; i++) {
    const user = `${prefix}-${i}`;
    if (treeLevel(position(key, user), h) === level) return user;
  }
  throw new Error("no such user");
}

test("mtsp: the tree's heights, levels, nodes and intervals", () => {
  assert.deepEqual([1, 2, 3, 4, 5, 8, 9, 65536].map(treeHeight), [1, 1, 2, 2, 3, 3, 4, 16]);
  assert.throws(() => treeHeight(0), RangeError);
  assert.throws(() => treeHeight(65537), RangeError);
  assert.equal(treeLevel(0, 5), 1);
  assert.equal(treeLevel(2 ** 32 - 1, 5), 5);
  assert.equal(treeLevel(2 ** 32 - 1, 16), 16);
  assert.equal(treeLevel(2 ** 28 - 1, 16), 1); // floor(at h / 2^32) exactly: just below 1/16
  assert.equal(treeLevel(2 ** 28, 16), 2);
  assert.throws(() => treeLevel(2 ** 32, 3), RangeError);
  assert.deepEqual([1, 2, 3].map((l) => levelCells(7, 3, l)), [2, 4, 7]);
  assert.deepEqual([1, 2, 3].map((l) => nodeOf(6, 3, l)), [1, 3, 6]);
  assert.throws(() => levelCells(7, 3, 4), RangeError);
  assert.deepEqual([0, 1, 2, 3, 6].map((x) => intervalOf(x, [0, 2, 4, 6])), [0, 0, 1, 1, 3]);
  assert.equal(intervalOf(5, [0]), 0);
  assert.equal(intervalOf(65535, [0, 65535]), 1);
});

test("mtsp: needs the stream's public key; round 1 over the level's nodes, on virtual slots", () => {
  const config = { protocol: "mtsp", user: "u", d: 6, w: 2, E: 1 };
  assert.throws(() => checkConfig(config), RangeError);
  assert.throws(() => new LdpClient(config), RangeError);
  assert.throws(() => new LdpClient({ ...config, lpuKey: "" }), RangeError);
  assert.throws(() => new LdpClient({ ...config, lpuKey: 7 }), TypeError);
  const key = "tree-key";
  const h = treeHeight(7);
  assert.equal(h, 3);
  for (const level of [1, 2, 3]) {
    const user = treeUser(key, `level-${level}`, h, level);
    const client = new LdpClient({ ...config, user, lpuKey: key, start: 4 });
    assert.equal(client.tree, true);
    assert.equal(client.position, null); // not a population protocol
    assert.equal(client.height, h);
    assert.equal(client.level, level);
    assert.equal(client.levelCells, levelCells(7, h, level));
    assert.equal(client.eps, dissimilarityBudget(2, 1));
    assert.equal(client.ledger.w, 4); // virtual slots, window 2w
    const r = decode(client.report(4, 5));
    assert.deepEqual(Object.keys(r), ["v", "protocol", "user", "slot", "round", "eps", "E", "w", "d", "cells", "oracle", "bits", "client"]);
    assert.equal(r.round, 1);
    assert.equal(r.eps, 0.25);
    assert.equal(r.d, 6);
    assert.equal(r.cells, client.levelCells);
    assert.equal(unpackBits(r.bits, r.cells).length, r.cells);
    // after the first slot, only where the previous decision asks it (next: E/(2w), always)
    assert.equal(client.report(5, null), null);
    assert.throws(() => client.report(5, 1, new Decision("app", "mtsp", 4, 0, 0.5)), RangeError);
    const blank = decode(client.report(5, null, new Decision("app", "mtsp", 4, 0, 0.25)));
    assert.equal(blank.cells, client.levelCells);
    assert.deepEqual(client.ledger.dump(), [[virtualSlot(4, 1), 0.25], [virtualSlot(5, 1), 0.25]]);
  }
  assert.equal(new LdpClient({ protocol: "lbd", user: "u", d: 4, w: 2, E: 1 }).level, 0);
});

test("mtsp: round 1 keeps its node's bit with 1/2, the level's other nodes with T/2^32", () => {
  const key = "tree-key";
  const user = treeUser(key, "middle", 3, 2);
  const client = new LdpClient({ protocol: "mtsp", user, d: 6, w: 1, E: 1, lpuKey: key });
  assert.equal(client.levelCells, 4); // cells 0-1, 2-3, 4-5 and 6 (no value)
  const q = oueThreshold(0.5) / 2 ** 32;
  const n = 20000;
  let slot = 0;
  for (const [value, node] of [[5, 2], [null, 3]]) {
    const ones = [0, 0, 0, 0];
    for (let i = 0; i < n; i++) {
      const previous = slot === 0 ? null : new Decision("app", "mtsp", slot - 1, 0, 0.5);
      const r = JSON.parse(client.reportText(slot++, value, previous));
      unpackBits(r.bits, 4).forEach((b, j) => (ones[j] += b));
    }
    ones.forEach((k, j) => {
      const expect = j === node ? 0.5 : q;
      assert.ok(Math.abs(k / n - expect) < 0.02, `value ${value} node ${j}: ${k / n} vs ${expect}`);
    });
  }
});

test("mtsp: round 2 over the decision's intervals; forged decisions are argument errors", () => {
  const key = "tree-key";
  const client = new LdpClient({ protocol: "mtsp", user: "ivy", d: 6, w: 2, E: 1, lpuKey: key });
  const notRefusal = (e) => e instanceof RangeError && !(e instanceof LedgerRefusal);
  const at = (slot, eps, starts) => new Decision("app", "mtsp", slot, eps, 0.25, 0, 0, starts);
  assert.throws(() => client.answer(at(0, 0.75, [0, 2]), 1), notRefusal); // over E/2
  assert.throws(() => client.answer(at(0, 0.5, [0, 7]), 1), notRefusal); // past the d + 1 = 7 cells
  assert.throws(() => client.answer(at(0, 0.5, [0, 3, 65535]), null), notRefusal);
  assert.throws(() => client.answer(new Decision("app", "lbd", 0, 0.5, 0.25), 1), notRefusal);
  assert.throws(() => client.answer(at(0, 0.5, [0, 2]), 6), notRefusal); // value d: not a value
  assert.deepEqual(client.ledger.dump(), []);
  assert.equal(client.answer(at(0, 0, []), 1), null); // no publication round
  for (const [slot, starts, value] of [
    [0, [0, 2, 4, 6], 5],
    [2, [0], 1],
    [4, [0, 1, 2, 3, 4, 5, 6], null],
    [6, [0, 6], null], // the last interval: "no value" alone
  ]) {
    const r = decode(client.answer(at(slot, 0.5, starts), value));
    assert.equal(r.round, 2);
    assert.equal(r.slot, slot);
    assert.equal(r.eps, 0.5);
    assert.equal(r.cells, starts.length); // the width is the number of intervals
    assert.equal(unpackBits(r.bits, starts.length).length, starts.length);
  }
  assert.deepEqual(client.ledger.dump(), [[virtualSlot(6, 2), 0.5]]); // a window of 2w = 4 virtual slots
  assert.equal(decode(client.report(7, 1, at(6, 0.5, [0, 6]))).cells, client.levelCells);
  // a forged decision asking E/2 again within the window is refused by the ledger
  assert.throws(
    () => client.answer(at(7, 0.5, [0, 3]), 1),
    (e) => e instanceof LedgerRefusal && e.code === "over_budget",
  );
  // round 2 keeps the interval's bit with 1/2, the others with T/2^32
  const stats = new LdpClient({ protocol: "mtsp", user: "stats", d: 6, w: 1, E: 2, lpuKey: key });
  const q = oueThreshold(1) / 2 ** 32;
  const n = 20000;
  const ones = [0, 0, 0];
  for (let slot = 0; slot < n; slot++) {
    const r = decode(stats.answer(new Decision("app", "mtsp", slot, 1, 1, 0, 0, [0, 3, 5]), 4));
    unpackBits(r.bits, 3).forEach((b, j) => (ones[j] += b));
  }
  ones.forEach((k, j) => {
    const expect = j === 1 ? 0.5 : q;
    assert.ok(Math.abs(k / n - expect) < 0.02, `interval ${j}: ${k / n} vs ${expect}`);
  });
});

test("mtsp: decisions carry their partition, written and read strictly", () => {
  const d = new Decision("app", "mtsp", 1042, 0.25, 0.05, 0, 0, [0, 4, 6]);
  const text = decisionText(d);
  assert.equal(text, '{"v":1,"stream":"app","protocol":"mtsp","slot":1042,"eps":0.25,"next":0.05,"starts":[0,4,6]}');
  assert.deepEqual(parseDecision(text), d);
  assert.ok(Object.isFrozen(d) && Object.isFrozen(d.starts));
  const none = new Decision("app", "mtsp", 3, 0, 0.05);
  assert.equal(decisionText(none), '{"v":1,"stream":"app","protocol":"mtsp","slot":3,"eps":0,"next":0.05,"starts":[]}');
  assert.deepEqual(new Decision("app", "lbd", 3, 0.5, 0.25).starts, []);
  const mine = [0, 2];
  const copied = new Decision("app", "mtsp", 1, 0.5, 0.25, 0, 0, mine);
  mine.push(5);
  assert.deepEqual(copied.starts, [0, 2]); // a copy, not the caller's array
  for (const [eps, starts] of [
    [0.5, []], // a publication budget naming no partition
    [0, [0]], // a partition without a budget
    [0.5, [1, 2]], // not from 0
    [0.5, [0, 2, 2]],
    [0.5, [0, 3, 2]],
    [0.5, [0, 1.5]],
    [0.5, [0, 65536]],
    [0.5, [0, -1]],
    [0.5, [true]],
    [0.5, ["0"]],
  ]) {
    assert.throws(() => new Decision("app", "mtsp", 1, eps, 0.25, 0, 0, starts), RangeError, JSON.stringify(starts));
  }
  assert.throws(() => new Decision("app", "mtsp", 1, 0.5, 0.25, 0, 0, "0"), TypeError);
  assert.throws(() => new Decision("app", "lbd", 1, 0.5, 0.25, 0, 0, [0]), RangeError); // lbd: none
  assert.throws(() => new Decision("app", "lpd", 1, 1, 1, 0, 1, [0]), RangeError);
  for (const bad of [
    text.replace(',"starts":[0,4,6]', ""), // mtsp without its partition
    text.replace("[0,4,6]", "[0,4.0,6]"),
    text.replace("[0,4,6]", "[0,4e0,6]"),
    text.replace("[0,4,6]", '"0,4,6"'),
    text.replace("[0,4,6]", "[0,[4],6]"),
    text.replace("[0,4,6]", "[0,4,6,65536]"),
    text.replace("[0,4,6]", "[]"), // eps > 0: a partition needed
    text.replace('"next":0.05,"starts":[0,4,6]', '"starts":[0,4,6],"next":0.05'),
    text.replace("[0,4,6]", "[0,4,6],\"extra\":1"),
    decisionText(new Decision("app", "lba", 3, 0.5, 0.25)).replace("}", ',"starts":[]}'), // lba with one
  ]) {
    assert.throws(() => parseDecision(bad), (e) => !(e instanceof LedgerRefusal), bad);
  }
  assert.deepEqual(parseDecision(text.replace("[0,4,6]", "[ -0 , 4,\n6 ]")).starts, [0, 4, 6]);
  assert.ok(Object.is(parseDecision(text.replace("[0,4,6]", "[-0,4,6]")).starts[0], 0));
});

// Range queries over releases (queries.ts): post-processing, no budget.

test("range queries: an mtsp range of whole intervals has bars, a partial one does not", () => {
  const mtsp = {
    slot: 0,
    counts: [1, 2, 3, 4, 5],
    no_value: 0,
    std: [null, null, 3, null, null],
    intervals: { starts: [0, 2, 3], counts: [3, 3, 9], std: [4, 3, 12] },
  };
  const whole = (a, b) => rangeQueries([mtsp], a, b)[0];
  assert.deepEqual(whole(0, 1), { from: 0, to: 1, count: 3, std: 4, period: 3 });
  assert.equal(whole(0, 2).std, 5); // sqrt(4^2 + 3^2)
  assert.equal(whole(2, 2).std, 3);
  assert.equal(whole(0, 0).std, null); // half of [0, 1]
  assert.equal(whole(1, 2).std, null); // starts inside [0, 1]
  assert.equal(whole(2, 3).std, null); // ends inside [3, ...]
  assert.equal(whole(3, 4).std, null); // b + 1 = 5 starts no interval
  assert.equal(whole(0, 4).count, 15);
  // Cells estimated alone: any range has bars, unless a cell has none or the release no std.
  const cells = { slot: 1, counts: [1, 2, 3], no_value: 0, std: [3, 4, 12] };
  assert.equal(rangeQueries([cells], 0, 1)[0].std, 5);
  assert.equal(rangeQueries([cells], 0, 2)[0].std, 13);
  assert.equal(rangeQueries([{ ...cells, std: [3, null, 12] }], 0, 0)[0].std, 3);
  assert.equal(rangeQueries([{ ...cells, std: [3, null, 12] }], 0, 1)[0].std, null);
  assert.equal(rangeQueries([{ ...cells, std: null }], 0, 0)[0].std, null);
  assert.equal(rangeQueries([{ slot: 2, counts: [1, 2, 3] }], 0, 0)[0].std, null);
});

test("range queries: periods over delta slots, events against the previous period; refusals", () => {
  const releases = [10, 20, 30, 100, -50, 5].map((c, slot) => ({ slot, counts: [c, 1], std: null }));
  const got = rangeQueries(releases, 0, 0, { delta: 2, ratio: 2, margin: 1 });
  assert.deepEqual(got.map((r) => r.period), [null, 30, 50, 130, 50, -45]);
  // i = 2: period[0] is null, so no event; i = 3: 130 > 2 * 30 + 1; i = 5: -45 > 2 * max(130, 0) + 1 no.
  assert.deepEqual(got.map((r) => r.event), [0, 0, 0, 1, 0, 0]);
  // A negative previous period is clipped at 0: the bar is 2 * 0 - 50, not 2 * -45 - 50 = -140.
  const negative = (c) => rangeQueries([{ counts: [-45] }, { counts: [c] }], 0, 0, { ratio: 2, margin: -50 });
  assert.deepEqual(negative(-100).map((r) => r.event), [0, 0]);
  assert.deepEqual(negative(-40).map((r) => r.event), [0, 1]);
  assert.ok(rangeQueries(releases, 0, 1).every((r) => !("event" in r) && r.period === r.count));
  assert.ok(rangeQueries(releases, 0, 1, { ratio: null }).every((r) => !("event" in r)));
  assert.deepEqual(rangeQueries([], 7, 3, { delta: 9 }), []);
  for (const [a, b] of [[-1, 0], [1, 0], [0, 2], [0.5, 1], [0, "1"]]) {
    assert.throws(() => rangeQueries(releases, a, b), RangeError, `${a}:${b}`);
  }
  for (const delta of [0, 7, 1.5]) {
    assert.throws(() => rangeQueries(releases, 0, 0, { delta }), RangeError, `delta ${delta}`);
  }
  assert.equal(rangeQueries(releases, 0, 0, { delta: 6 })[5].period, 115);
});
