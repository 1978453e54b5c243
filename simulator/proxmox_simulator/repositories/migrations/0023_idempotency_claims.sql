-- A write carrying an Idempotency-Key claims the key before its handler runs.
-- A duplicate arriving meanwhile (on any replica) finds the claim and waits for
-- the stored answer instead of running the write a second time.  A failed
-- write deletes its claim, so only successes are ever replayed.
CREATE TABLE idempotency_claims (
    key        text PRIMARY KEY,
    request    text NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    answered   boolean NOT NULL DEFAULT false,
    answer     jsonb
);
