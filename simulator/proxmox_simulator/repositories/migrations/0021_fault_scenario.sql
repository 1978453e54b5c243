-- The active fault scenario, shared by every replica and the CLI (one row or none).
-- A new generation (enable/re-enable) restarts every rule's seeded random stream;
-- toggling a rule keeps the generation.
CREATE SEQUENCE fault_generation_seq;

CREATE TABLE fault_scenario (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    name       text NOT NULL,
    seed       bigint NOT NULL,
    rules      jsonb NOT NULL,
    generation bigint NOT NULL,
    enabled_at timestamptz NOT NULL DEFAULT now()
);
