// Package sqlite stands in for modernc.org/sqlite in TokenFleet's build of llm-d-inference-sim.
//
// The simulator imports the driver (a blank import in pkg/dataset) only for its dataset response
// mode (--dataset-path, --dataset-url), which TokenFleet never uses: its engines run in echo or
// random mode. The real driver and its libc are the most expensive packages of a cold build
// (about 30 s of CPU on two cores, and the largest heap). Opening a database through this
// stand-in fails with an error that says why.
package sqlite

import (
	"database/sql"
	"database/sql/driver"
	"errors"
)

var errLeftOut = errors.New("this llm-d-inference-sim was built by TokenFleet without the sqlite " +
	"driver (tools/sim/nosqlite): the dataset response mode (--dataset-path, --dataset-url) is not available")

type leftOut struct{}

// Open refuses every database: the driver is not in this build.
func (leftOut) Open(string) (driver.Conn, error) { return nil, errLeftOut }

func init() { sql.Register("sqlite", leftOut{}) }
