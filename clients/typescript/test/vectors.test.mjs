// The shared vectors (clients/vectors/ldp-vectors.json): every value the Python implementation
// wrote, reproduced here.
import assert from "node:assert/strict";
import { createHash, createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import {
  checkConfig,
  CounterWords,
  decisionText,
  encodeDecision,
  formatString,
  grrCell,
  grrKeepThreshold,
  hmacSha256,
  LdpClient,
  LedgerRefusal,
  levelCells,
  lpuPhase,
  nodeOf,
  oueThreshold,
  parseDecision,
  phase,
  plbuUsesGrr,
  portableExp,
  position,
  rangeQueries,
  sha256,
  treeHeight,
  treeLevel,
} from "../dist/index.js";

const vectors = JSON.parse(
  readFileSync(new URL("../../vectors/ldp-vectors.json", import.meta.url), "utf-8"),
);

function bitsOf(x) {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  return view.getBigUint64(0).toString(16).padStart(16, "0");
}

function configOf(c) {
  const { lpu_key: lpuKey, ...rest } = c;
  return lpuKey === undefined ? rest : { ...rest, lpuKey };
}

test("counter words", () => {
  const words = new CounterWords(vectors.words.seed);
  assert.deepEqual(vectors.words.first.map(() => words.nextWord()), vectors.words.first);
});

test("portable exp, bit for bit", () => {
  for (const { x, bits } of vectors.exp) assert.equal(bitsOf(portableExp(x)), bits, `exp(${x})`);
});

test("thresholds and PLBU's oracle", () => {
  for (const t of vectors.thresholds) {
    assert.equal(oueThreshold(t.eps), t.oue, `oue ${t.eps}`);
    assert.equal(grrKeepThreshold(t.eps, t.d), t.grr, `grr ${t.eps} ${t.d}`);
    assert.equal(plbuUsesGrr(t.eps, t.d), t.plbu_grr, `plbu ${t.eps} ${t.d}`);
  }
});

test("numbers as the wire writes them", () => {
  for (const { x, text } of vectors.numbers) assert.equal(String(x), text);
});

test("LPU groups", () => {
  for (const g of vectors.lpu_groups) assert.equal(lpuPhase(g.key, g.user, g.w, g.epoch), g.group, JSON.stringify(g));
});

test("LPD's and LPA's positions and phases", () => {
  assert.ok(vectors.positions.length > 0);
  let lower = 0;
  for (const p of vectors.positions) {
    const where = JSON.stringify(p);
    assert.equal(position(p.key, p.user), p.position, where);
    assert.ok(p.phases.length > 0, where);
    for (const [w, k] of p.phases) assert.equal(phase(p.position, w), k, `${where} w ${w}`);
    if (p.position < 2 ** 31) lower++;
  }
  assert.ok(lower > 0 && lower < vectors.positions.length, "both halves in the vectors");
});

test("MTSP's tree: heights, levels by position, each level's nodes", () => {
  assert.ok(vectors.tree_levels.length > 0);
  const levels = new Set();
  for (const t of vectors.tree_levels) {
    const where = JSON.stringify(t);
    const cells = t.d + 1;
    assert.equal(treeHeight(cells), t.height, where);
    assert.equal(treeLevel(position(t.key, t.user), t.height), t.level, where);
    assert.equal(t.widths.length, t.height, where);
    t.widths.forEach((width, i) => assert.equal(levelCells(cells, t.height, i + 1), width, `${where} level ${i + 1}`));
    assert.ok(t.nodes.length > 0, where);
    for (const [cell, node] of t.nodes) assert.equal(nodeOf(cell, t.height, t.level), node, `${where} cell ${cell}`);
    levels.add(t.level === 1 ? "root" : t.level === t.height ? "leaves" : "inner");
  }
  assert.deepEqual([...levels].sort(), ["inner", "leaves", "root"]);
});

test("GRR draws, rejection included", () => {
  for (const g of vectors.grr_draws) {
    let used = 0;
    const words = { nextWord: () => g.words[used++] };
    assert.equal(grrCell(g.cell, g.d, g.keep, words), g.out, JSON.stringify(g));
    assert.equal(used, g.used);
  }
});

test("refused configurations", () => {
  for (const c of vectors.bad_configs) assert.throws(() => checkConfig(configOf(c)), JSON.stringify(c));
});

test("clients: reports, refusals, ledgers and words drawn", () => {
  let blanks = 0; // no-value steps that sent a report (wire version 2: cell d)
  for (const c of vectors.clients) {
    const words = new CounterWords(c.seed);
    const client = new LdpClient(configOf(c.config), { words, client: c.client });
    if (c.state !== null) client.ledger.load(c.state);
    for (const step of c.steps) {
      const where = `${c.name} slot ${step.slot}`;
      if (step.refused !== undefined) {
        assert.throws(
          () => client.report(step.slot, step.value),
          (e) => e instanceof LedgerRefusal && e.code === step.refused,
          where,
        );
      } else {
        const bytes = client.report(step.slot, step.value);
        assert.equal(bytes === null ? null : new TextDecoder().decode(bytes), step.report, where);
        if (step.value === null && bytes !== null) blanks++;
      }
      assert.deepEqual(client.ledger.dump(), step.spends, where);
      assert.equal(words.drawn, step.words, where);
    }
  }
  assert.ok(blanks > 0, "the vectors send reports without a value");
});

test("decisions: read, refused, and written back byte for byte", () => {
  assert.ok(vectors.decisions.length > 0);
  const protocols = new Set();
  for (const { text, read } of vectors.decisions) {
    const bytes = new TextEncoder().encode(text);
    if (read === null) {
      assert.throws(() => parseDecision(bytes), (e) => !(e instanceof LedgerRefusal), text);
      assert.throws(() => parseDecision(text), (e) => !(e instanceof LedgerRefusal), text);
      continue;
    }
    for (const data of [bytes, text]) {
      const d = parseDecision(data);
      assert.deepEqual(
        {
          stream: d.stream,
          protocol: d.protocol,
          slot: d.slot,
          eps: d.eps,
          next: d.next,
          from: d.from,
          size: d.size,
          starts: [...d.starts],
        },
        read,
        text,
      );
      assert.ok(Object.isFrozen(d.starts), text);
      assert.equal(decisionText(d), text);
      assert.deepEqual(encodeDecision(d), bytes);
      protocols.add(d.protocol);
    }
  }
  for (const p of ["lbd", "lba", "lpd", "lpa", "mtsp"]) assert.ok(protocols.has(p), `an ${p} decision read`);
});

test("round clients: both rounds' reports, refusals, errors, ledgers and words drawn", () => {
  assert.ok(vectors.round_clients.length > 0);
  const outcomes = new Set();
  for (const c of vectors.round_clients) {
    const words = new CounterWords(c.seed);
    const client = new LdpClient(configOf(c.config), { words, client: c.client });
    c.steps.forEach((step, i) => {
      const where = `${c.name} step ${i} (round ${step.round}, slot ${step.slot})`;
      const decision = step.decision === null ? null : parseDecision(step.decision);
      if (decision !== null) assert.equal(decisionText(decision), step.decision, where);
      if (step.round === 2) assert.equal(decision.slot, step.slot, where);
      const run = () =>
        step.round === 1 ? client.report(step.slot, step.value, decision) : client.answer(decision, step.value);
      if (step.refused !== undefined) {
        outcomes.add("refused");
        assert.throws(run, (e) => e instanceof LedgerRefusal && e.code === step.refused, where);
      } else if (step.error === true) {
        outcomes.add("error");
        assert.throws(run, (e) => !(e instanceof LedgerRefusal), where);
      } else {
        assert.ok("report" in step, where);
        const bytes = run();
        outcomes.add(bytes === null ? "none" : "report");
        assert.equal(bytes === null ? null : new TextDecoder().decode(bytes), step.report, where);
      }
      assert.deepEqual(client.ledger.dump(), step.spends, where);
      assert.deepEqual(client.state().spends, step.spends, where);
      assert.equal(words.drawn, step.words, where);
    });
  }
  assert.deepEqual([...outcomes].sort(), ["error", "none", "refused", "report"]);
  const protocols = new Set(vectors.round_clients.map((c) => c.config.protocol));
  for (const p of ["lbd", "lba", "lpd", "lpa", "mtsp"]) assert.ok(protocols.has(p), `a ${p} round client`);
});

test("range queries: counts, bars, periods and events over the releases, bit for bit", () => {
  const releases = vectors.query_releases;
  assert.equal(releases.length, 6);
  const before = JSON.stringify(releases);
  let answered = 0;
  let refused = 0;
  const seen = new Set();
  for (const c of vectors.range_queries) {
    const where = JSON.stringify({ ...c, ranges: undefined });
    const options = { delta: c.delta, ratio: c.ratio, margin: c.margin };
    if (c.error) {
      assert.ok(!("ranges" in c), where);
      assert.throws(() => rangeQueries(releases, c.from, c.to, options), Error, where);
      refused++;
      continue;
    }
    const got = rangeQueries(releases, c.from, c.to, options);
    assert.equal(got.length, c.ranges.length, where);
    assert.equal(got.length, releases.length, where);
    c.ranges.forEach((want, i) => {
      const at = `${where} release ${i}`;
      assert.deepEqual(Object.keys(got[i]).sort(), Object.keys(want).sort(), at);
      for (const key of Object.keys(want)) {
        assert.ok(got[i][key] === want[key], `${at} ${key}: ${got[i][key]} !== ${want[key]}`);
        if (typeof want[key] === "number") assert.equal(bitsOf(got[i][key]), bitsOf(want[key]), `${at} ${key}`);
      }
      if (want.std !== null) seen.add("std");
      if (want.std === null) seen.add("no std");
      if (want.period === null) seen.add("no period");
      if (want.event === 1) seen.add("event");
    });
    answered++;
  }
  assert.ok(answered > 0 && refused > 0);
  assert.deepEqual([...seen].sort(), ["event", "no period", "no std", "std"]);
  assert.equal(JSON.stringify(releases), before, "the releases are left as they were");
  assert.deepEqual(rangeQueries([], 0, 0), []);
});

test("SHA-256 and HMAC-SHA256 agree with node:crypto", () => {
  const words = new CounterWords("sha");
  for (const n of [0, 1, 55, 56, 63, 64, 65, 119, 120, 200, 1000]) {
    const data = Uint8Array.from({ length: n }, () => words.nextWord() & 255);
    assert.equal(Buffer.from(sha256(data)).toString("hex"), createHash("sha256").update(data).digest("hex"));
    for (const k of [0, 1, 64, 65, 100]) {
      const key = data.subarray(0, Math.min(k, n));
      assert.equal(
        Buffer.from(hmacSha256(key, data)).toString("hex"),
        createHmac("sha256", key).update(data).digest("hex"),
      );
    }
  }
});

test("the wire's strings parse back as JSON", () => {
  for (const s of ['a"b\\c', "\u0000\u001f\u007f", "zoë 🚀", "\n\t"]) assert.equal(JSON.parse(formatString(s)), s);
});
