-- The simulation-clock time a task was created at (fractional seconds).
-- Workers schedule simulated durations from it, so a task's simulated end
-- does not depend on when a worker happened to claim it.
ALTER TABLE tasks ADD COLUMN clock_start double precision;
