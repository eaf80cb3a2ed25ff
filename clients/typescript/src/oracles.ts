/**
 * OUE and GRR from uniform 32-bit words against integer thresholds, and the portable exp that
 * every client language computes bit for bit alike (docs/ldp-reports.md).
 *
 * The functions here take the number of cells the oracle runs over; a client runs them over
 * d + 1 cells (wire.ts, oracleCells): the d value cells and cell d, "no value". So an OUE report
 * draws d + 1 words and packs d + 1 bits, GRR keeps or moves among d + 1 cells, and PLBU's
 * choice and GRR's threshold are computed for d + 1 cells.
 */

export const WORD = 4294967296;
export const HALF_WORD = 2147483648;
/** The largest budget one report may spend. */
export const MAX_EPS = 500;

const LN2_HI = 6.9314718036912381649e-1;
const LN2_LO = 1.90821492927058770002e-10;
const INV_LN2 = 1.442695040888963387;
const DEGREE = 13;
const COEFFICIENTS: number[] = [];
{
  let factorial = 1;
  for (let n = 0; n <= DEGREE; n++) {
    if (n > 0) factorial *= n; // exact: 13! < 2^53
    COEFFICIENTS.push(1 / factorial);
  }
}
const POW2 = new DataView(new ArrayBuffer(8));

/** 2^k for 0 <= k <= 1023, exactly. */
function pow2(k: number): number {
  POW2.setUint32(0, (k + 1023) * 1048576);
  POW2.setUint32(4, 0);
  return POW2.getFloat64(0);
}

/** e^x for 0 <= x <= 500: range reduction and a degree-13 Taylor polynomial in doubles. */
export function portableExp(x: number): number {
  if (!(x >= 0 && x <= MAX_EPS)) throw new RangeError(`portableExp takes 0 <= x <= ${MAX_EPS}, got ${x}`);
  const k = Math.floor(x * INV_LN2 + 0.5);
  const r = x - k * LN2_HI - k * LN2_LO;
  let p = COEFFICIENTS[DEGREE];
  for (let n = DEGREE - 1; n >= 0; n--) p = p * r + COEFFICIENTS[n];
  return p * pow2(k);
}

/** `eps` if it lies in (0, 500], else a RangeError. */
export function checkEps(eps: number): number {
  if (typeof eps !== "number" || !(eps > 0 && eps <= MAX_EPS)) {
    throw new RangeError(`a report's budget must lie in (0, ${MAX_EPS}], got ${eps}`);
  }
  return eps;
}

/** OUE's threshold for the other cells' bits: ceil(q 2^32), q = 1/(e^eps + 1). */
export function oueThreshold(eps: number): number {
  const q = 1 / (portableExp(checkEps(eps)) + 1);
  return Math.max(1, Math.ceil(q * WORD));
}

/** GRR's threshold for keeping the true cell: floor(p 2^32), p = e^eps/(e^eps + d - 1). */
export function grrKeepThreshold(eps: number, d: number): number {
  const e = portableExp(checkEps(eps));
  return Math.floor((e / (e + (d - 1))) * WORD);
}

/** Whether PLBU reports through GRR: when e^eps + d - 2 < 4 e^eps (GRR's variance lower). */
export function plbuUsesGrr(eps: number, d: number): boolean {
  const e = portableExp(checkEps(eps));
  return e + (d - 2) < 4 * e;
}

/** A source of uniform words in [0, 2^32), drawn in order. */
export interface WordSource {
  nextWord(): number;
}

/** GRR's report of `cell` over `d` cells (no word drawn over one cell). */
export function grrCell(cell: number, d: number, keep: number, words: WordSource): number {
  if (d === 1) return cell;
  if (words.nextWord() < keep) return cell;
  const others = d - 1;
  const limit = WORD - (WORD % others);
  for (;;) {
    const u = words.nextWord();
    if (u < limit) return (cell + 1 + (u % others)) % d;
  }
}

const HEX: string[] = [];
for (let i = 0; i < 256; i++) HEX.push(i.toString(16).padStart(2, "0"));

/**
 * OUE's report of `cell` over `d` cells, as lowercase hex of the packed bits: bit j is bit
 * (j mod 8) of byte j/8, drawn from word j (1 with probability 1/2 at the cell, T/2^32 elsewhere).
 */
export function oueHex(cell: number, d: number, threshold: number, words: WordSource): string {
  let out = "";
  let byte = 0;
  for (let j = 0; j < d; j++) {
    const u = words.nextWord();
    if (j === cell ? u < HALF_WORD : u < threshold) byte |= 1 << (j & 7);
    if ((j & 7) === 7) {
      out += HEX[byte];
      byte = 0;
    }
  }
  if ((d & 7) !== 0) out += HEX[byte];
  return out;
}
