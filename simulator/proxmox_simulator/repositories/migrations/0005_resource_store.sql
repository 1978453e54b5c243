-- State of the contract-driven resource store: every declared collection item
-- or config object that no bespoke handler owns.  "collection" is the item's
-- path template (or the config object's path), "scope" the values of the
-- parent path parameters ({"node": "pve1"}), "key" the item's own path
-- parameter value ('' for a config object).

CREATE TABLE resource_store (
    collection text NOT NULL,
    scope jsonb NOT NULL DEFAULT '{}'::jsonb,
    key text NOT NULL,
    data jsonb NOT NULL,
    position bigint NOT NULL,
    version bigint NOT NULL DEFAULT 1,
    updated_at double precision NOT NULL,
    PRIMARY KEY (collection, scope, key)
);

CREATE SEQUENCE resource_store_position;
