-- Each task counts its log lines.  An append reserves its line numbers by bumping
-- this counter, so concurrent appenders queue on the task's row instead of
-- reading the same max(n) and colliding on task_log's primary key.
ALTER TABLE tasks ADD COLUMN log_lines int NOT NULL DEFAULT 0;

UPDATE tasks SET log_lines = counted.n
FROM (SELECT upid, max(n) AS n FROM task_log GROUP BY upid) AS counted
WHERE tasks.upid = counted.upid;
