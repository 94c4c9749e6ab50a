module ruleop.test/pause

go 1.25.0
