-- PostgreSQL's migration 0009 adds two functions for the license group's statements:
-- `small_json_array`, a row estimate for its planner, and `group_rows_written`, the write
-- statement's check of its own work. SQLite's planner already probes the indexes from
-- `json_each`, and SQLite's group writes under its one write lock, so nothing changes here; the
-- file keeps both backends' migrations numbered alike.
SELECT 1;
