//! quirl.lua-worker@1 protocol (skeleton; filled by the protocol issue).
