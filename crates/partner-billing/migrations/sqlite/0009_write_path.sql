-- PostgreSQL's migration 0009 adds two functions for the license group's statements
-- (`small_json_array`, a row estimate for its planner, and `group_rows_written`, the write
-- statement's check of its own work) and stores promo recovery payloads uncompressed. SQLite's
-- planner already probes the indexes from `json_each`, its group writes under its one write
-- lock, and it compresses nothing, so nothing changes here; the file keeps both backends'
-- migrations numbered alike.
SELECT 1;
