#!/bin/sh
# mpirun's rsh agent across chorusrun --netns namespaces (scripts/netns_mpirun.sh): "HOST CMD..."
# runs CMD in the namespace of the emulated node whose address is HOST
# (10.213.0.<k+1> -> chorus-<pid>-node<k>, the naming of tools/run/netns.cc).
host=$1
shift
k=$((${host##*.} - 1))
me=$(ip netns identify $$)
exec ip netns exec "${me%node*}node$k" sh -c "$*"
