"""Package version. Must match CF_VERSION_* in include/convfuse.h and project(VERSION) in CMakeLists.txt;
the loader refuses a library whose cf_version() has another MAJOR.MINOR."""

__version__ = "0.1.0"
