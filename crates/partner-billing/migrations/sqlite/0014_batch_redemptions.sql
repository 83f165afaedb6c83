-- How often a batch's codes were redeemed, kept on the batch by each redemption (in its
-- transaction), so that the batch lists read one number per batch instead of counting the
-- redemptions of its codes: that count read every redemption of the database when the planner
-- had no statistics, and a thousand index probes per batch when it had.
ALTER TABLE promo_batches ADD COLUMN redeemed BIGINT NOT NULL DEFAULT 0;
UPDATE promo_batches SET redeemed = (
    SELECT COUNT(*) FROM promo_redemptions r JOIN promo_codes c ON c.code_hash = r.code_hash
    WHERE c.batch_row_id = promo_batches.id
);
