-- A node's /etc/network/interfaces (applied) and interfaces.new (pending,
-- NULL when nothing is pending), and its small system files (resolv.conf,
-- hosts, timezone).  Rows appear on first use from the seeded defaults.
CREATE TABLE node_network (
    node    text PRIMARY KEY REFERENCES nodes ON DELETE CASCADE ON UPDATE CASCADE,
    applied jsonb NOT NULL,
    pending jsonb,
    version int NOT NULL DEFAULT 1
);

CREATE TABLE node_settings (
    node    text NOT NULL REFERENCES nodes ON DELETE CASCADE ON UPDATE CASCADE,
    key     text NOT NULL,
    value   jsonb NOT NULL,
    version int NOT NULL DEFAULT 1,
    PRIMARY KEY (node, key)
);
