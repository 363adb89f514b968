//! The out-of-band control protocol over TCP.
