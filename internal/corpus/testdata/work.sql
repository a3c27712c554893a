-- The corpus's SQL workload for Debian's sqlite3 (in memory): generate
-- rows with a recursive CTE, index them, then aggregate, join and sort.
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1500000)
INSERT INTO t SELECT i, (i * 7919) % 10007, printf('value-%08d', (i * 2654435761) % 1000003) FROM n;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_v ON t(v);
SELECT k, count(*), max(v) FROM t GROUP BY k ORDER BY count(*) DESC, k LIMIT 3;
SELECT count(*) FROM t a JOIN t b ON a.k = b.k AND a.id < b.id WHERE a.id % 10 = 0;
SELECT sum(length(v)) FROM (SELECT v FROM t ORDER BY substr(v, 7) DESC);
SELECT count(DISTINCT substr(v, 1, 9)) FROM t;
