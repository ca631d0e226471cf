package mem

import (
	"testing"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) forewarn.Store { return New() })
}
