#pragma once

// The fuseserve-cli subcommands (one file each). Every one takes argv with
// argv[0] = the subcommand's name, prints its usage on --help, writes results
// to stdout and errors to stderr, and returns an exit code from flags.h.

#include "client/cli/flags.h"

namespace fuseserve::client::cli {

int RunHealthCommand(const GlobalOptions& global, int argc, char** argv);
int RunMetadataCommand(const GlobalOptions& global, int argc, char** argv);
int RunConfigCommand(const GlobalOptions& global, int argc, char** argv);
int RunStatsCommand(const GlobalOptions& global, int argc, char** argv);
int RunInferCommand(const GlobalOptions& global, int argc, char** argv);
int RunMakeRepositoryCommand(int argc, char** argv);

}  // namespace fuseserve::client::cli
