// Stands in for modernc.org/sqlite in TokenFleet's build of llm-d-inference-sim (see sqlite.go).
module modernc.org/sqlite

go 1.26.0
