-- PostgreSQL's migration 0009 adds `small_json_array`, a row estimate for its planner. SQLite's
-- planner already probes the indexes from `json_each` (one row per element), so nothing
-- changes here; the file keeps both backends' migrations numbered alike.
SELECT 1;
