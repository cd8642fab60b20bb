#!/bin/sh
# write.sh: a program in any language writing under `solo run --fence-dsn`.
# Every write is one transaction that first checks, with the statements of
# docs/design.md ("The fence"), that the term solo claimed for this run is
# still the stored one and still ours. A stale leader (paused past its
# lease, then woken) fails the check: psql stops with an error, and the
# transaction, its INSERT included, is rolled back.
#
# solo gives: SOLO_TERM, SOLO_ID (the holder), SOLO_ELECTION, SOLO_FENCE_TABLE.
# The program brings its own database URL (here DATABASE_URL) and data.
set -eu
n=0
while :; do
	n=$((n + 1))
	psql "$DATABASE_URL" -q -v ON_ERROR_STOP=1 \
		-v election="$SOLO_ELECTION" -v term="$SOLO_TERM" -v holder="$SOLO_ID" \
		-v fence="$SOLO_FENCE_TABLE" -v n="$n" <<'SQL'
BEGIN;
-- A frozen writer holds the next leader off at most this long (the guard's
-- default; docs/design.md, "Failover with the fence").
SET LOCAL idle_in_transaction_session_timeout = '4s';
-- Queue fairly behind a new leader's claim (PostgreSQL advisory locks are FIFO).
SELECT pg_advisory_xact_lock_shared(:'fence'::regclass::oid::integer, hashtext(:'election'));
-- Division by zero unless the stored term and holder are ours; FOR SHARE
-- holds them until COMMIT.
SELECT 1 / count(*) FROM (
	SELECT 1 FROM :"fence" WHERE election = :'election' AND term = :term AND holder = :'holder' FOR SHARE
) AS fenced;
INSERT INTO items (term, holder, n) VALUES (:term, :'holder', :n);
COMMIT;
SQL
	if [ "${WRITE_ONCE:-}" = 1 ]; then exit 0; fi
	sleep 0.05
done
