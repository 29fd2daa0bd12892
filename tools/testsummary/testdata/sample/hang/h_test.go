package hang

import (
	"testing"
	"time"
)

func TestQuick(t *testing.T) {}

func TestHang(t *testing.T) { t.Log("sleeping"); time.Sleep(time.Minute) }
