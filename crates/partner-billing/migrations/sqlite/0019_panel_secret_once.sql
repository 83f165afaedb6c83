-- The panel shows a new secret once: the page after its form opens it from a sealed cookie, and
-- the session records which such message it still has to show. Showing it clears this, so the
-- same cookie sent again shows nothing.
ALTER TABLE panel_sessions ADD COLUMN secret_message_nonce TEXT;
