// Command appliance is a self-hosted managed-PostgreSQL service in one binary.
package main

import "github.com/theappliance/appliance/cmd"

func main() { cmd.Execute() }
