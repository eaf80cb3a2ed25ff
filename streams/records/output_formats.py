"""The record formats of the topics the job writes: releases (one private histogram per slot,
versioned by :data:`RELEASE_VERSION`), slot partials (a partition's messages to the coordinator)
and decisions (what each slot charged, the stream's start record and the declaration records)."""

from __future__ import annotations

from typing import Final

from streams.records.field_formats import (
    CELL_COUNTS,
    COUNT,
    COUNTS_PER_LEVEL,
    STREAM,
    budget_format,
    window_format,
)
from streams.records.format_nodes import (
    Array,
    Bool,
    Enum,
    Field,
    Format,
    Int,
    Map,
    Null,
    Num,
    OneOf,
    Record,
    Str,
)

__all__ = [
    "CELLS_INLINE_MAX",
    "CELL_LABELS",
    "DECISIONS",
    "NOISE_DISTRIBUTIONS",
    "RELEASES",
    "RELEASE_VERSION",
    "SLOT_PARTIALS",
]

# -- releases -----------------------------------------------------------------------------------

#: The release format's version: 1 had no ``schema_version``, ``cells``, ``noise`` or
#: ``approximates``; additive changes keep the version.
RELEASE_VERSION: Final = 2
#: A domain of more cells than this names its cell labels by reference in releases (they are in
#: the stream's start record on the decisions topic, under ``config.cells``).
CELLS_INLINE_MAX: Final = 1000
#: The ``noise.distribution`` of each ``noise`` setting of the job.
NOISE_DISTRIBUTIONS: Final = {"discrete": "discrete_laplace", "laplace": "laplace"}

CELL_LABELS: Final = Array(items=Str(), min_items=1,
                           description="Every cell's label, in histogram order.")

RELEASES: Final = Format(
    "releases",
    "release",
    Record(
        (
            Field("schema_version", Int(minimum=2, description=f"The release format's version "
                                        f"({RELEASE_VERSION} here; absent in version 1). A "
                                        "later version may add fields: read the ones you know, "
                                        "ignore the others.")),
            Field("stream", STREAM),
            Field("slot", Int()),
            Field("start", Int(description="Slot start, epoch ms (inclusive).")),
            Field("end", Int(description="Slot end, epoch ms (exclusive); also the record's "
                                         "Kafka timestamp.")),
            Field("mechanism", Str(min_length=1)),
            Field("published", Bool(description="true: a fresh noisy histogram; false: the last "
                                                "one, approximating this slot.")),
            Field("nullified", Bool(description="Approximated because an earlier publication "
                                                "borrowed this slot's budget.")),
            Field("histogram", Array(items=Num(), min_items=1)),
            Field("threshold", Num(minimum=0, description="The OBS threshold of the publication "
                                                         "budgets (0 when none applied).")),
            Field("users", Int(minimum=0, description=(
                "Registered users charged at this slot; under default requirements each default "
                "level counts its public prior instead of the devices seen."))),
            Field(
                "cells",
                OneOf(
                    (
                        CELL_LABELS,
                        Record(
                            (
                                Field("ref", Str(min_length=1, description="The key of the "
                                                 "stream's start record (\"<stream>/start\") "
                                                 "on the decisions topic, whose config.cells "
                                                 "holds the labels.")),
                                Field("size", Int(minimum=1, description="How many cells.")),
                            ),
                            additional=True,
                            description=f"A domain of more than {CELLS_INLINE_MAX} cells: the "
                            "labels by reference.",
                        ),
                    ),
                    description="The configured domain's cell labels, in histogram order: a "
                    "cell index (\"0\", \"1\", ...), a bin \"[low, high)\", a grid cell "
                    "\"lon [a, b) lat [c, d)\" or a label; by reference for a large domain.",
                ),
            ),
            Field(
                "noise",
                OneOf(
                    (
                        Record(
                            (
                                Field("distribution", Str(min_length=1, description="\""
                                      "discrete_laplace\" (integer k with probability "
                                      "proportional to a^|k|, 0 < a < 1, variance "
                                      "2a/(1-a)^2) or \"laplace\" (density proportional to "
                                      "exp(-|x|/b), variance 2b^2); zero-mean, drawn "
                                      "independently per cell.")),
                                Field("scale", Array(items=Num(exclusive_minimum=0), min_items=1,
                                                     description="Per cell, in histogram "
                                                     "order: the standard deviation of the noise "
                                                     "added (for a count summed over several "
                                                     "noisy terms, the square root of the sum "
                                                     "of their variances).")),
                                Field("thinned", Bool(description="Present and true when the "
                                      "publication sampled users away (a level with users "
                                      "whose budget is below the threshold): the histogram "
                                      "holds the sampled users only, so bars from scale would "
                                      "not hold the true count at their confidence and clients "
                                      "give none. A function of the level budgets, sizes and "
                                      "threshold only."), required=False),
                            ),
                            additional=True,
                            description="Published: the noise added to the sampled counts in "
                            "this slot.",
                        ),
                        Null(description="Not published: no noise was drawn in this slot, the "
                             "histogram repeats the publication of slot approximates."),
                    ),
                    description="The noise added in this slot, from the configuration and the "
                    "publication threshold alone. It does not cover the Sampling Mechanism's "
                    "thinning of users whose budget is below the threshold.",
                ),
            ),
            Field("approximates", Int(nullable=True, description="Not published: the slot whose "
                                      "publication the histogram repeats (null: none yet, the "
                                      "histogram is all zeros). Published: null.")),
            Field(
                "estimate",
                Record(
                    (
                        Field("method", Str(min_length=1, description="\"round\" (the "
                                            "histogram rounded and clipped at 0), \"kalman\" "
                                            "(a Kalman filter over this and the earlier "
                                            "releases of the stream, then rounded), "
                                            "\"kalman_bank\" (per cell, the best predicting "
                                            "of a bank of such filters, then rounded) or "
                                            "\"kalman_split\" (per cell, that bank or the "
                                            "banks of the cells' mean and of their deviations "
                                            "from it, whichever predicted better, then "
                                            "rounded).")),
                        Field("histogram", Array(items=Int(minimum=0), min_items=1,
                                                 description="The post-processed counts, in "
                                                 "histogram order.")),
                    ),
                    additional=True,
                    description="With --postprocess: the release post-processed, a function of "
                    "the released histograms and public fields of this and earlier slots only "
                    "(no privacy cost). It carries no error bars: the noise fields describe "
                    "histogram, not this.",
                ),
                required=False,
            ),
        ),
        additional=True,
        description="One private histogram per released slot (key = \"<stream>/<slot>\"; "
        "Kafka timestamp = end). Every field is the noisy histogram or a function of public "
        "inputs (configuration, requirements, slot, the publish/approximate decision): no exact "
        "count of reports accepted or rejected. A release emitted again (after a restart) is "
        "byte-identical: keep the first per key. Consumers must ignore fields they do not "
        "know.",
    ),
    version=RELEASE_VERSION,
)

# -- slot partials ------------------------------------------------------------------------------

CLOSED_AT: Final = Field(
    "closed_at_ms",
    Int(minimum=0, description="The partition worker's clock (epoch ms) when its watermark "
        "passed the end of slot closed_through; the release latency counts from the latest of "
        "the partitions'. Absent in messages of older versions: the coordinator counts from "
        "their receipt."),
    required=False,
)

SLOT_PARTIALS: Final = Format(
    "slot-partials",
    "slot partial",
    OneOf(
        (
            Record(
                (
                    Field("partition", COUNT),
                    Field("closed_through", Int(description="Every slot up to this one is "
                                                            "closed in this partition.")),
                    CLOSED_AT,
                    Field(
                        "slots",
                        Map(
                            Record(
                                (
                                    Field("counts", Map(CELL_COUNTS, description="Per "
                                                        "requirement level \"<w>:<E>\", "
                                                        "reports per cell.")),
                                    Field("accepted", COUNT),
                                ),
                                additional=False,
                            )
                        ),
                    ),
                    Field("users", COUNTS_PER_LEVEL),
                    Field("rejected", COUNT),
                ),
                additional=False,
                description="One partition closing slots (key = \"<stream>/<partition>\"): the "
                "counts of every slot it closed that had reports, its registered users per "
                "requirement level (public), how many records it rejected since its previous "
                "partial, and when it closed them.",
            ),
            Record(
                (
                    Field("partition", COUNT),
                    Field("closed_through", Int()),
                    CLOSED_AT,
                    Field("first", Int(nullable=True)),
                    Field("rejected", COUNT),
                ),
                additional=False,
                description="Dynamic mechanisms (dpbd, dpba): the partition closed every slot up "
                "to closed_through (at closed_at_ms); first is its earliest slot with a report "
                "(null: none yet); rejected counts its rejected records since its previous "
                "message.",
            ),
            Record(
                (
                    Field("partition", COUNT),
                    Field("plan", Int(description="The slot planned.")),
                    Field("counts", Map(CELL_COUNTS, description="Per budget level "
                                        "\"<c1>:<c2>\" (grid codes of eps1 and eps2), reports "
                                        "per cell; levels without reports left out.")),
                    Field("users", COUNTS_PER_LEVEL),
                    Field("accepted", COUNT),
                    Field("nullified", Bool()),
                    Field("projected", COUNTS_PER_LEVEL),
                ),
                additional=False,
                description="Dynamic mechanisms (dpbd, dpba): the partition's plan of one slot: "
                "its report counts and registered users per budget level, whether its users "
                "nullify the slot (dpba), and per budget level how many of them had a backward "
                "budget projected.",
            ),
        ),
        description="A partition's message to the coordinator (key = \"<stream>/<partition>\"). "
        "Fixed mechanisms: one partial per slot close. Dynamic mechanisms: a closure, or the plan "
        "of one slot. Internal topic: the job writes and reads it with the same version.",
    ),
)

# -- decisions ----------------------------------------------------------------------------------

EPS_PER_LEVEL: Final = Map(Num(minimum=0))

DECISIONS: Final = Format(
    "decisions",
    "decision",
    OneOf(
        (
            Record(
                (
                    Field("stream", STREAM),
                    Field("slot", Int()),
                    Field("published", Bool()),
                    Field("nullified", Bool()),
                    Field("eps1", EPS_PER_LEVEL),
                    Field("eps2", EPS_PER_LEVEL),
                    Field("users", COUNTS_PER_LEVEL),
                    Field(
                        "projected",
                        Map(COUNT, description="dpbd, dpba: per budget level, the users whose "
                            "lowered backward budget was projected (raised to what their window "
                            "already spent)."),
                        required=False,
                    ),
                ),
                additional=True,
                description="What one slot charged (key = \"<stream>/<slot>\"): the decision "
                "and, per level, the dissimilarity budget eps1 and the publication budget eps2 "
                "every user of the level was charged, with the level's user count. A level is a "
                "requirement \"<w>:<E>\" under a fixed mechanism, a budget level \"<c1>:<c2>\" "
                "(grid codes of eps1 and eps2) under dpbd and dpba, which also count the users "
                "whose backward budget was projected.",
            ),
            Record(
                (
                    Field("stream", STREAM),
                    Field("start", Int()),
                    Field("nonce", Str(pattern="^[0-9a-f]+$")),
                    Field("secret_check", Str(pattern="^[0-9a-f]{16}$", description="HMAC-SHA256 "
                          "under the deployment secret of a fixed message and the stream, cut to "
                          "16 hex digits: a worker started with another secret refuses to run."),
                          required=False),
                    Field(
                        "config",
                        Record(
                            (
                                Field("mechanism", Str()),
                                Field("d", Int(minimum=1)),
                                Field("partitions", Int(minimum=1)),
                                Field("min_epsilon", Num(exclusive_minimum=0)),
                                Field("max_epsilon", Num(exclusive_minimum=0)),
                                Field("max_window", Int(minimum=1)),
                                Field("neighbouring", Enum(("add-remove", "replace"))),
                                Field("noise", Enum(("discrete", "laplace")), required=False),
                                Field("slot_ms", Int(minimum=1), required=False),
                                Field("origin_ms", Int(), required=False),
                                Field("cells", CELL_LABELS, required=False),
                            ),
                            additional=True,
                        ),
                    ),
                ),
                additional=True,
                description="Key = \"<stream>/start\": the stream's first slot (where every "
                "dynamic ledger starts), the nonce drawn when the stream started (it keys the "
                "stream's randomness with the secret) and the job's public parameters, for "
                f"auditors; config.cells holds the cell labels of a domain of more than "
                f"{CELLS_INLINE_MAX} cells (its releases refer to them).",
            ),
            Record(
                (
                    Field("stream", STREAM),
                    Field("declared", Int(description="The slot the declarations took effect "
                                          "at.")),
                    Field("partition", COUNT),
                    Field("chunk", COUNT),
                    Field("chunks", Int(minimum=1)),
                    Field(
                        "users",
                        Map(OneOf((
                            Array(prefix=(window_format("wB."), budget_format("EB."),
                                          window_format("wF."), budget_format("EF.")),
                                  min_items=4, max_items=4),
                            Null(description="The user's ledger was suspended (it left)."),
                        ))),
                    ),
                ),
                additional=True,
                description="Dynamic mechanisms, key = \"<stream>/declared/<slot>/<partition>/"
                "<chunk>\": whose declarations (wB, EB, wF, EF) took effect at the slot, and "
                "whose ledgers were suspended, on one partition; requirements are public. Written "
                "by the partitions for auditors; the workers ignore them.",
            ),
        ),
        description="The coordinator's records: one decision per released slot and the stream's "
        "start record; under dpbd and dpba also the partitions' declaration records. Consumers "
        "must ignore fields they do not know.",
    ),
)
