-- A transactional change counter for guests: readers compare it with the
-- generation a cached rendering was built from.  A row (not a sequence) so the
-- new value becomes visible only when the writing transaction commits.

CREATE TABLE guest_generation (
    id    int PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    value bigint NOT NULL
);
INSERT INTO guest_generation (id, value) VALUES (1, 1);

CREATE FUNCTION bump_guest_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE guest_generation SET value = value + 1 WHERE id = 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER guests_generation
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON guests
FOR EACH STATEMENT EXECUTE FUNCTION bump_guest_generation();
