//! GPU engine (wgpu compute): under construction, see issue 3.
