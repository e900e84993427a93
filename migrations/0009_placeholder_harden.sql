-- 0009 PLACEHOLDER on the `harden` branch only: 0009 belongs to recall's branch this round. It exists
-- so this branch's 0012 applies without a gap; delete it when merging.
SELECT 1;
