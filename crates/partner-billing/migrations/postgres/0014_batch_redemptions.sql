-- How often a batch's codes were redeemed, kept on the batch, so that the batch lists read one
-- number per batch instead of counting the redemptions of its codes: that count read every
-- redemption of the database when the planner had no statistics, and a thousand index probes
-- per batch when it had. A trigger keeps it, in the redemption's transaction, whichever
-- process (of whichever version) inserts the redemption.
ALTER TABLE promo_batches ADD COLUMN redeemed BIGINT NOT NULL DEFAULT 0;

UPDATE promo_batches AS b SET redeemed = counted.n
FROM (SELECT c.batch_row_id, count(*) AS n
      FROM promo_redemptions r JOIN promo_codes c ON c.code_hash = r.code_hash
      GROUP BY c.batch_row_id) AS counted
WHERE b.id = counted.batch_row_id;

CREATE FUNCTION count_batch_redemption() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE promo_batches SET redeemed = redeemed + 1
    WHERE id = (SELECT batch_row_id FROM promo_codes WHERE code_hash = NEW.code_hash);
    RETURN NULL;
END
$$;

CREATE TRIGGER promo_redemptions_count AFTER INSERT ON promo_redemptions
    FOR EACH ROW EXECUTE FUNCTION count_batch_redemption();
