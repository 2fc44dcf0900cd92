#!/usr/bin/env bash
# EKS AMI bootstrap (placeholder for the fixture)
