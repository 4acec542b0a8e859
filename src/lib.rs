//! rrpdem: a discrete-element solver for particle-binder composites built on the explicit
//! variational integrator on rescaled Rodrigues parameters (Baker & Gonzalez).
//!
//! Layout: [`rrp`] (rotation math), [`interactions`] (one module per physical term),
//! [`integrator`] (the three maps), [`model`] (resolved particles and bonds), [`grid`]
//! (contact search), [`engine`] (the CPU reference engine and the shared `Engine` interface),
//! [`scenario`] (JSON input and the geometry generators), [`generate`] (geometry written out and
//! reported), [`diagnostics`], [`fragments`] (pieces of intact binder), [`stability`], [`output`] and [`vtk`] (ParaView frames), [`run`],
//! [`study`] and [`converge`] (drivers used by the CLI), [`checkpoint`], [`impact`], [`bench`],
//! [`plot`] (figures).

pub mod bench;
pub mod checkpoint;
pub mod compare;
pub mod converge;
pub mod diagnostics;
pub mod engine;
pub mod error;
pub mod fragments;
pub mod generate;
pub mod gpu;
pub mod grid;
pub mod guard;
pub mod impact;
pub mod integrator;
pub mod interactions;
pub mod json_diff;
pub mod model;
pub mod order;
pub mod output;
pub mod plot;
pub mod provenance;
pub mod rng;
pub mod rrp;
pub mod run;
pub mod scenario;
pub mod stability;
pub mod study;
pub mod vtk;
