#!/usr/bin/env bash
# What a synchronous standby costs the write path (docs/operations.md, "What synchronous
# replication costs"): the load benchmark against the Patroni pair that `.ci/failover` builds
# (synchronous_mode, behind HAProxy), in one run on the same cluster, first with
# `synchronous_commit = local` for the bench database's connections (a commit waits for the
# leader's own disk only), then with the default `on` (it also waits for the standby).
# Runs as root (the cluster runs as `postgres`); needs patroni, etcd-server, haproxy and the
# release build (`cargo build --release -p partner-billing-server -p partner-billing-tests
# --bin loadbench`).
#
# Usage: docs/bench/sync-standby.sh [loadbench options]   (default: 8 and 64 clients, 5 s)
set -euo pipefail
cd "$(dirname "$0")/../.."
args=${*:---clients 8,64 --seconds 5 --scenario license-hot,license-spread,promo}
export FAILOVER_SECONDS=${FAILOVER_SECONDS:-1800}
export FAILOVER_COMMAND="target/release/loadbench --server-bin target/release/partner-billing-server \
  --database \"\$PARTNER_BILLING_FAILOVER_URL?options[synchronous_commit]=local\" \
  --database \"\$PARTNER_BILLING_FAILOVER_URL\" $args"
exec .ci/failover
