package main

import (
	"context"
	"os"

	"softib/tools/srpt"
)

func init() {
	register(&command{
		name:    "srpt",
		summary: "SRP target serving file or memory LUNs to Linux ib_srp over the RDMA CM",
		run: func(args []string) int {
			return srpt.Run(context.Background(), args, os.Stderr)
		},
	})
}
