package org.pwevent.ldp;

/** A report or state the ledger refuses; {@link #code()} says why. */
public final class LedgerRefusal extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String code;

  /** A refusal: {@code code} is not_after_last, over_budget or bad_state. */
  public LedgerRefusal(String code, String message) {
    super(message);
    this.code = code;
  }

  /** not_after_last, over_budget or bad_state. */
  public String code() {
    return code;
  }
}
