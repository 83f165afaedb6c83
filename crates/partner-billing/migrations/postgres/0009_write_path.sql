-- The elements of a small JSON array, for the set-oriented license group statements, which
-- pass a group's rows (at most 64) as one JSON parameter. `json_array_elements` tells the
-- planner to expect 100 rows, so once a prepared statement goes generic PostgreSQL joins the
-- array to `balances`, `users`, `idempotency_records` and `balance_alerts` by hashing a scan
-- of the whole table: a cost that grows with every license issued. With `ROWS 1` it probes
-- each table's primary or unique index once per element instead. STRICT keeps PostgreSQL from
-- inlining the function (it would then use `json_array_elements`'s estimate again); a NULL
-- array has no elements.
CREATE FUNCTION small_json_array(json) RETURNS SETOF json
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE ROWS 1
    AS 'SELECT json_array_elements($1)';

-- The license group's write statement ends with this check of its own row counts: when a
-- balance no longer holds what the group read (another process charged or credited it in
-- between), it fails the whole statement as a serialization failure, so nothing is written and
-- the group runs again under locks.
CREATE FUNCTION group_rows_written(ok boolean) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT ok THEN
        RAISE EXCEPTION 'a row the license group read changed before its write'
            USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN ok;
END
$$;

-- A promo batch's recovery payload is ciphertext (hex, about 40 kB for 1000 codes): compression
-- gains little on it and cost a few percent of the database's CPU per batch. Stored out of line
-- as it is.
ALTER TABLE promo_recovery_payloads ALTER COLUMN sealed_codes SET STORAGE EXTERNAL;
