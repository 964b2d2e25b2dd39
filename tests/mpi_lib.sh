# tests/mpi_lib.sh: what the MPI test scripts share (sourced, with the
# script's arguments AMPC MPIEXEC): the environment of a run under mpirun,
# a temporary folder removed on exit, die (records a failure) and mpi N CMD.
OMP_WAIT_POLICY=passive
# no cross-memory attach between ranks: containers often forbid the ptrace
# it needs, and the messages here are small
OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_WAIT_POLICY OMPI_MCA_btl_vader_single_copy_mechanism
ampc=$1
mpiexec=${2:-mpirun}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*" >&2; fail=1; }
# root (CI) must say so to Open MPI; more ranks than cores is fine here
mpi() {
  n=$1
  shift
  "$mpiexec" --allow-run-as-root --oversubscribe -np "$n" "$@"
}
