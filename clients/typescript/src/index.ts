/** pwevent-ldp-client: local differential privacy reports, randomised on the device. */

export { CLIENT_NAME, checkConfig, LdpClient, slotOf, TOPIC, topicName } from "./client.js";
export type { ClientOptions, LedgerState, ReportConfig } from "./client.js";
export { ClientLedger, LedgerRefusal, SLACK } from "./ledger.js";
export type { Spend } from "./ledger.js";
export {
  grrCell,
  grrKeepThreshold,
  HALF_WORD,
  MAX_EPS,
  oueHex,
  oueThreshold,
  plbuUsesGrr,
  portableExp,
  WORD,
} from "./oracles.js";
export type { WordSource } from "./oracles.js";
export { HALF, inInterval, inRound1, phase, position, POSITIONS } from "./population.js";
/**
 * MTSP-LDP's budget-free range and event-monitoring queries over the local-DP collector's
 * releases: post-processing of what was released, so no privacy budget is spent. Mirrors
 * `pwevent releases --ldp --range A:B --delta N --event RATIO` (streams/releases/ldp.py,
 * `range_queries`), bit for bit.
 */
export { rangeQueries } from "./queries.js";
export type { LdpRelease, RangeQuery, RangeQueryOptions, ReleaseIntervals } from "./queries.js";
export {
  Decision,
  DECISION_VERSION,
  decisionText,
  dissimilarityBudget,
  encodeDecision,
  MAX_ROUND_SLOT,
  parseDecision,
  virtualSlot,
} from "./rounds.js";
export {
  HOMOGENEOUS,
  isKeyed,
  isPopulationProtocol,
  isRoundProtocol,
  KEYED,
  lpuPhase,
  POPULATION_PROTOCOLS,
  PROTOCOLS,
  reportBudget,
  ROUND_PROTOCOLS,
  Schedule,
} from "./schedule.js";
export type { PopulationProtocol, Protocol, RoundProtocol } from "./schedule.js";
export { framedHmac, hmacSha256, sha256 } from "./sha256.js";
export {
  checkStarts,
  intervalOf,
  isTreeProtocol,
  levelCells,
  nodeOf,
  TREE_PROTOCOL,
  treeHeight,
  treeLevel,
} from "./tree.js";
export { checkText, formatString, MAX_CELLS, MAX_SLOT, oracleCells, WIRE_VERSION } from "./wire.js";
export { CounterWords, CryptoWords } from "./words.js";
