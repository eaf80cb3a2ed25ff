#!/usr/bin/env bash
# The trust model of docs/operations.md ("Trust model") as Kafka ACLs, for a cluster that runs Kafka's
# StandardAuthorizer with allow.everyone.if.no.acl.found=false and SASL principals:
#
#   worker    the job: reads its inputs, writes its outputs and internal topics, creates and
#             uses its tables' changelogs and consumer group; nothing else
#   producer  writes reports and requirements; reads nothing
#   analyst   reads releases and decisions; nothing else (refused on reports, requirements,
#             slot-partials, dead-letters and the changelogs). It learns the configuration,
#             the declared requirements and the noisy releases; under default requirements
#             each default level counts its public prior, so not who appeared when (the
#             requirements topic, which records every default registration, stays closed)
#
# Usage: deploy/acls.sh BOOTSTRAP PREFIX STREAM [WORKER PRODUCER ANALYST]
# Environment: KAFKA_ACLS, the kafka-acls command (default: kafka-acls.sh on PATH);
# COMMAND_CONFIG, the administrator's client properties (SASL_SSL settings), if any.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 BOOTSTRAP PREFIX STREAM [WORKER PRODUCER ANALYST]" >&2
  exit 2
fi
bootstrap=$1 prefix=$2 stream=$3
worker=${4:-worker} producer=${5:-producer} analyst=${6:-analyst}
app="pwevent-${prefix}-${stream}"   # the workers' consumer group and changelog prefix
read -r -a acls <<< "${KAFKA_ACLS:-kafka-acls.sh}"
config=()
if [ -n "${COMMAND_CONFIG:-}" ]; then
  config=(--command-config "$COMMAND_CONFIG")
fi

allow() {  # PRINCIPAL PATTERN-TYPE RESOURCE-FLAG "NAME..." OPERATION...: one command
  local who=$1 pattern=$2 kind=$3 names=$4
  shift 4
  local args=()
  for name in $names; do args+=("$kind" "$name"); done
  for op in "$@"; do args+=(--operation "$op"); done
  "${acls[@]}" --bootstrap-server "$bootstrap" "${config[@]}" --add \
    --allow-principal "User:$who" --resource-pattern-type "$pattern" "${args[@]}" >/dev/null
}

topics() {  # the full names of logical topics
  local out=()
  for topic in "$@"; do out+=("$prefix.$topic"); done
  echo "${out[*]}"
}

# the worker: every topic of the job (it also writes reports: its idle-close watermarks), its
# changelogs (created by the worker, so Create), its consumer group
allow "$worker" literal --topic "$(topics reports requirements slot-partials decisions)" \
  Read Describe
allow "$worker" literal --topic "$(topics reports slot-partials releases decisions dead-letters)" \
  Write Describe
allow "$worker" prefixed --topic "$app-" Read Write Create Describe DescribeConfigs
allow "$worker" prefixed --group "$app" Read Describe
# producers: the two input topics
allow "$producer" literal --topic "$(topics reports requirements)" Write Describe
# analysts: what the job publishes
allow "$analyst" literal --topic "$(topics releases decisions)" Read Describe
echo "ACLs set for $prefix ($stream): worker $worker, producer $producer, analyst $analyst"
