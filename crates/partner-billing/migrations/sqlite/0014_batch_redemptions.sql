-- How often a batch's codes were redeemed, kept on the batch, so that the batch lists read one
-- number per batch instead of counting the redemptions of its codes (a count that grows with
-- every redemption of the database). A trigger keeps it, in the redemption's transaction,
-- whichever process inserts the redemption.
ALTER TABLE promo_batches ADD COLUMN redeemed INTEGER NOT NULL DEFAULT 0;

UPDATE promo_batches SET redeemed = (
    SELECT COUNT(*) FROM promo_redemptions r JOIN promo_codes c ON c.code_hash = r.code_hash
    WHERE c.batch_row_id = promo_batches.id
);

CREATE TRIGGER promo_redemptions_count AFTER INSERT ON promo_redemptions
BEGIN
    UPDATE promo_batches SET redeemed = redeemed + 1
    WHERE id = (SELECT batch_row_id FROM promo_codes WHERE code_hash = NEW.code_hash);
END;
