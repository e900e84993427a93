-- 0009 PLACEHOLDER on the `remind` branch only: 0009 belongs to the recall branch (issue 19's
-- brief). It exists so this branch's 0010 applies without a gap; delete it when merging.
SELECT 1;
