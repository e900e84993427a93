-- 0011 PLACEHOLDER on the `harden` branch only: 0011 belongs to another helper's branch this round. It exists
-- so this branch's 0012 applies without a gap; delete it when merging.
SELECT 1;
